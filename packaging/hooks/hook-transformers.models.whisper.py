"""transformers' Whisper (MuseTalk's audio features): ``from transformers import
WhisperFeatureExtractor`` is resolved lazily, so the sub-modules are named here. The
transformers hook of pyinstaller-hooks-contrib keeps the sources beside the bytecode (its lazy
modules list their folder) and copies its dependencies' metadata."""

from PyInstaller.utils.hooks import collect_submodules

hiddenimports = collect_submodules(
    "transformers.models.whisper", filter=lambda name: not name.rsplit(".", 1)[-1].startswith(("modeling_tf_", "modeling_flax_"))
)
