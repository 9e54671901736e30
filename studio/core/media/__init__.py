"""Media in and out: voice-overs (decode, frame grid, silence mask), speech synthesis, timecode, and the
video writer with its encoders, mux, video hints and host copies."""
