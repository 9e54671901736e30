"""``studio speak`` (text to a voice-over with Piper, offline) and ``studio captions`` (a script's
captions timed to a voice-over, as .srt or .vtt)."""

from __future__ import annotations

import sys


def register(sub) -> None:
    from studio.cli._common import JSON_RESULT, runs

    p = sub.add_parser("speak", help="speak a script into a WAV voice-over (Piper's natural voice, offline)")
    p.add_argument("text", nargs="?", default=None, help="what the presenter says (or --text-file)")
    p.add_argument("--text-file", metavar="FILE", help="a UTF-8 .txt file with the script")
    p.add_argument("-o", "--output", help="the WAV to write")
    p.add_argument("--voice", default="", help="a Piper voice (default joe), or espeak[:VOICE] (see --list-voices)")
    p.add_argument("--list-voices", action="store_true", help="list the voices and stop")
    p.add_argument("--import-voice", metavar="VOICE.onnx", help="import a Piper voice (.onnx + .onnx.json) and stop")
    p.add_argument("--name", help="the imported voice's name (default: the file's)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    runs(p, run_speak, json=JSON_RESULT)

    c = sub.add_parser("captions", help="write a script's captions timed to its voice-over (.srt or .vtt)")
    c.add_argument("--audio", required=True, help="the voice-over")
    c.add_argument("--text", metavar="SCRIPT.txt", help="the script (default: the text it was spoken from)")
    c.add_argument("-o", "--output", required=True, help="OUT.srt or OUT.vtt")
    c.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    runs(c, run_captions, json=JSON_RESULT)


def read_script(path: str) -> str:
    """A script file's text; one sentence when it cannot be read."""
    from pathlib import Path

    from studio.core.errors import InputError
    from studio.core.store.small_files import read_small_text

    p = Path(path).expanduser()
    text = read_small_text(p, f"the script {path}")  # a folder, a FIFO, /dev/zero: what it is, in one sentence
    if not text.strip():
        raise InputError(f"{path}: the script is empty; write the text the presenter says in it")
    return text


def run_speak(args) -> int:
    import shutil
    from pathlib import Path

    from studio.cli._common import emit_json
    from studio.core.errors import InputError
    from studio.core.media import speech

    if args.list_voices:
        vs = speech.voices()
        if args.json:
            emit_json({"voices": vs, "default": speech.DEFAULT_VOICE})
        else:
            for name, where in vs.items():
                print(f"{name:24s} {where}")
        return 0
    if args.import_voice:
        name = speech.import_voice(args.import_voice, args.name)
        if args.json:
            emit_json({"voice": name, "folder": str(speech.voices_dir() / name)})
        else:
            print(f"imported voice {name} into {speech.voices_dir() / name}")
        return 0
    if (args.text is None) == (args.text_file is None):
        raise InputError("give the script as TEXT or --text-file FILE (one of them)")
    if not args.output:
        raise InputError("give the WAV to write with -o OUT.wav")
    out = Path(args.output)
    if out.suffix.lower() != ".wav":
        raise InputError(f"{out.name}: studio speak writes a .wav file")
    from studio.core.store.files import write_error
    from studio.core.store.fsutil import atomic_output

    text = args.text if args.text is not None else read_script(args.text_file)
    s = speech.synthesize(text, args.voice)
    if s.note:
        print(f"note: {s.note}", file=sys.stderr)
    try:
        with atomic_output(out, overwrite=args.overwrite) as written:
            shutil.copyfile(s.path, written.tmp)
    except OSError as exc:
        raise write_error(exc, out) from None
    final = Path(str(written.final))
    times = speech.write_sentences(s, final.with_suffix(".speech.json"), final)  # the captions' cue times
    info = {**s.to_json(), "output": str(final), "files": {"audio": str(final), "sentences": str(times)}}
    if args.json:
        emit_json(info)
    else:
        how = "cached" if s.cached else f"{s.synth_s:.1f} s to synthesise"
        print(
            f"wrote {written.final}: {s.duration_s:.1f} s, {len(s.sentences)} sentence(s), {s.engine} voice "
            f"{s.voice}, {s.sample_rate} Hz ({how})"
        )
    return 0


def run_captions(args) -> int:
    from pathlib import Path

    from studio.cli._common import emit_json
    from studio.core.captions import make_cues, script_sentences, write_captions
    from studio.core.errors import InputError
    from studio.core.media.audio import probe

    out = Path(args.output)
    if out.suffix.lower() not in (".srt", ".vtt"):
        raise InputError(f"{out.name}: captions are written as .srt or .vtt")
    probe(args.audio)  # one sentence for a voice-over that does not decode
    script = read_script(args.text) if args.text else ""
    cues = make_cues(script_sentences(args.audio, script))
    written = write_captions(cues, out, overwrite=args.overwrite)
    if args.json:
        emit_json(
            {
                "output": str(written),
                "files": {"captions": str(written)},
                "cues": [{"start_s": c.start_s, "end_s": c.end_s, "text": c.text} for c in cues],
            }
        )
    else:
        print(f"wrote {written}: {len(cues)} cue(s)")
    return 0
