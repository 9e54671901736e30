"""Benchmarks (``studio bench``): the reference workload (``reference``) and what users run
(``user``). Outside the core, which holds only what a render needs; a layer between the service
(whose own rows, ``studio.service.bench``, build on these) and the core (docs/architecture.md)."""
