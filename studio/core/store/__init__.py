"""What Studio keeps on disk: the data folder, imported weights, the SQLite job store, atomic outputs and
the temporary-file registry, and the output checks."""
