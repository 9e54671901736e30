"""The studio package: every sub-module, because ``studio.cli`` finds its sub-commands with
``pkgutil.iter_modules`` at run time (nothing imports them by name)."""

from PyInstaller.utils.hooks import collect_submodules

hiddenimports = collect_submodules("studio")
