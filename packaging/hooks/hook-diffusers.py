"""diffusers (MuseTalk's UNet, SD-VAE and TAESD): its top level resolves names lazily, so the
model modules are invisible to import analysis; it also reads its dependencies' versions from
their package metadata."""

from PyInstaller.utils.hooks import collect_submodules, copy_metadata

hiddenimports = collect_submodules("diffusers.models", filter=lambda name: "flax" not in name)
datas = copy_metadata("diffusers", recursive=True)
module_collection_mode = "pyz+py"
