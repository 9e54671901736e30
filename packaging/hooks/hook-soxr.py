"""python-soxr: the compiled resampler (libsoxr is linked into ``soxr_ext``) and its version file."""

from PyInstaller.utils.hooks import collect_dynamic_libs

hiddenimports = ["soxr.soxr_ext", "soxr._version"]
binaries = collect_dynamic_libs("soxr")
