// The page's logic without a browser: its URL state, the settings from the server's document, the
// form's sections, the server's notes, reconnection delays. `npm test` (Vitest); ./dev test runs it.
import { describe, expect, it } from 'vitest';
import { backoff, formatRoute, parseRoute, restoreSettings, settingValue } from '../src/route.js';
import { changedSettings, choicesOf, fieldOf, uiChanges } from '../src/schema.js';
import { sections } from '../src/Settings.jsx';
import { notesOf } from '../src/Viewer.jsx';

const spec = (name, extra) => ({ name, group: 'output', type: 'string', choices: null, minimum: null, maximum: null, default: null, apiDefault: null, nullable: true, autoLabel: '', ...extra });
const SPECS = [
  spec('engine', { group: 'engine', choices: ['classic', 'musetalk'], default: 'classic', apiDefault: 'classic', nullable: false }),
  spec('fps', { group: 'engine', choices: ['25', '29.97'] }),
  spec('crf', { group: 'encode', type: 'integer', minimum: 0, maximum: 51, default: 18, apiDefault: 18, nullable: false }),
  spec('check', { type: 'boolean', default: true, apiDefault: false, nullable: false }),
  spec('delivery', { choices: ['web-1080p', 'broadcast-hd'], default: '', apiDefault: '' }),
  spec('min_silence', { group: 'silence', type: 'integer', minimum: 1, maximum: 250, default: 5, apiDefault: 5, nullable: false }),
];

describe('the URL', () => {
  it('round-trips a job, the inputs, in/out and changed settings', () => {
    const state = { job: 42, avatar: 'anna', voice: '0123456789abcdef', in: 3, out: 99, settings: { crf: 20, check: false } };
    const hash = formatRoute(state);
    expect(hash).toBe('#/jobs/42?avatar=anna&voice=0123456789abcdef&in=3&out=99&set.check=false&set.crf=20');
    expect(parseRoute(hash)).toEqual({ ...state, settings: { crf: '20', check: 'false' } });
  });
  it('reads links to one avatar or voice-over, and drops what is not an id or a name', () => {
    expect(parseRoute('#/avatars/anna').avatar).toBe('anna');
    expect(parseRoute('#/voiceovers/0123456789abcdef').voice).toBe('0123456789abcdef');
    const bad = parseRoute('#/jobs/0?avatar=../x&voice=zz&in=-1&out=1e3');
    expect(bad).toEqual({ job: null, avatar: null, voice: null, in: null, out: null, settings: {} });
    expect(formatRoute({ job: null, settings: {} })).toBe('#/');
  });
  it('restores only valid settings onto the defaults', () => {
    const defaults = { engine: 'classic', crf: 18, check: true, fps: null };
    const got = restoreSettings(SPECS, defaults, { crf: '23', check: 'false', engine: 'nope', fps: '', unknown: '1' });
    expect(got).toEqual({ engine: 'classic', crf: 23, check: false, fps: null });
    expect(settingValue(SPECS[2], '99')).toBeUndefined();
    expect(settingValue(SPECS[2], '2.5')).toBeUndefined();
  });
  it('reconnects 1, 2, 4, 8 s apart, at most 15 s', () => {
    expect([0, 1, 2, 3, 4, 20].map((n) => backoff(n))).toEqual([1000, 2000, 4000, 8000, 15000, 15000]);
  });
});

describe('the settings', () => {
  it('reads a list the server declares as a pattern', () => {
    expect(choicesOf('^(|web-1080p|broadcast-hd)$')).toEqual(['web-1080p', 'broadcast-hd']);
    expect(choicesOf('^[a-z]+$')).toBeNull();
  });
  it('sends what differs from the API, keeps in the URL what differs from the page', () => {
    const values = { engine: 'classic', crf: 20, check: true, delivery: '', fps: null, min_silence: 5 };
    expect(changedSettings(SPECS, values)).toEqual({ crf: 20, check: true });
    expect(uiChanges(SPECS, values)).toEqual({ crf: 20 });
  });
  it('puts the output first and the engine behind Advanced', () => {
    const got = sections(SPECS).map((s) => [s.title, s.open, s.specs.map((x) => x.name)]);
    expect(got).toEqual([
      ['Output', true, ['delivery', 'fps', 'check']],
      ['Encode', true, ['crf']],
      ['Silence', true, ['min_silence']],
      ['Advanced (engine)', false, ['engine']],
    ]);
  });
  it('finds the field a refusal is about', () => {
    expect(fieldOf('crf: give 0 to 51', SPECS)).toBe('crf');
    expect(fieldOf("'crf': input should be less than or equal to 51", SPECS)).toBe('crf');
    expect(fieldOf('min_silence must be at least 1', SPECS)).toBe('min_silence');
    expect(fieldOf('the server cannot be reached', SPECS)).toBeNull();
  });
});

it("shows the server's notes and warnings with the result", () => {
  const job = { result: { notes: ['the avatar was kept at 2x'], warnings: ['loud'] }, warnings: ['late'] };
  expect(notesOf(job)).toEqual(['the avatar was kept at 2x', 'loud', 'late']);
  expect(notesOf(null)).toEqual([]);
});

it('names side files, a kind a newer server adds too', async () => {
  const { fileLabel } = await import('../src/Viewer.jsx');
  expect(['captions', 'check_report', 'job', 'lip_sync_map'].map(fileLabel)).toEqual(['Captions', 'Check report', 'Job JSON', 'Lip sync map']);
});
