"""Avatars: the library (prepare, load, list, remove), its cache and integrity checks, the builder,
the sources (photos and videos) and face tracking."""
