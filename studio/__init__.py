"""Studio: lip-synced presenter video from an avatar and a voice-over."""

__version__ = "0.1.0"
