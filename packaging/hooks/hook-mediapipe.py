"""mediapipe 0.10.21: its bundled graphs and models (face detection + face mesh) are data files
inside the package, looked up relative to the package folder at run time."""

from PyInstaller.utils.hooks import collect_data_files, collect_dynamic_libs

datas = collect_data_files("mediapipe", includes=["**/*.tflite", "**/*.binarypb", "**/*.pbtxt", "**/*.txt"])
binaries = collect_dynamic_libs("mediapipe")
