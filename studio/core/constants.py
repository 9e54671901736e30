"""One constant, one place: the time base and sizes every module shares."""

FPS = 25
SAMPLE_RATE = 16_000
SAMPLES_PER_FRAME = SAMPLE_RATE // FPS  # 640
FACE_SIZE = 256

DEFAULT_SILENCE_THRESHOLD = 0.008
DEFAULT_MIN_SILENCE_FRAMES = 3
