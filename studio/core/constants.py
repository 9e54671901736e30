"""One constant, one place: the time base and sizes every module shares."""

from fractions import Fraction

FPS = 25
SAMPLE_RATE = 16_000
SAMPLES_PER_FRAME = SAMPLE_RATE // FPS  # 640
FACE_SIZE = 256

DEFAULT_SILENCE_THRESHOLD = 0.008
DEFAULT_MIN_SILENCE_FRAMES = 3

#: the output rates Studio offers, by the name an editor uses
RATES: dict[str, Fraction] = {
    "23.976": Fraction(24000, 1001),
    "24": Fraction(24),
    "25": Fraction(25),
    "29.97": Fraction(30000, 1001),
    "30": Fraction(30),
    "50": Fraction(50),
    "59.94": Fraction(60000, 1001),
    "60": Fraction(60),
}

#: the longest script spoken or captioned at once (about 20 minutes of speech)
MAX_CHARS = 20_000
