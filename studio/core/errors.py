"""Errors the user can act on. Each carries one actionable sentence; the CLI prints it and exits 2."""


class StudioError(Exception):
    """Base class: bad input or an environment problem the user can fix. Exit code 2."""

    exit_code = 2


class InputError(StudioError):
    """A file or argument given by the user is missing, unreadable or invalid."""


class OutsideClip(InputError):
    """A frame or time past the clip's end (the server answers 404: there is no such frame)."""


class AudioError(InputError):
    """The audio file cannot be used."""


class AvatarError(InputError):
    """The avatar source or cache cannot be used."""


class NoSuchFace(AvatarError):
    """``--face N`` where the picture has fewer faces (the server answers 404: there is no such face)."""


class ModelError(StudioError):
    """Model weights are missing, truncated or of the wrong architecture."""


class RenderError(StudioError):
    """A render cannot start or could not finish (output folder, disk, encoder)."""


class Cancelled(StudioError):
    """The user cancelled a long job; nothing was written."""

    exit_code = 130
