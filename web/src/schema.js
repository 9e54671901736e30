// The render settings as the server declares them: RenderForm in /openapi.json (made on the server
// from the one settings schema). Nothing about a setting is typed in the page.
import { getFresh } from './api.js';

function kindOf(prop) {
  const variants = prop.anyOf ? prop.anyOf.filter((p) => p.type !== 'null') : [prop];
  const v = variants[0] || {};
  return { ...v, enum: v.enum || choicesOf(v.pattern), nullable: Boolean(prop.anyOf?.some((p) => p.type === 'null')) };
}

/** The names a pattern like ^(|a|b-c)$ allows (a list the server declares as a pattern), or null. */
export function choicesOf(pattern) {
  const m = /^\^\(([A-Za-z0-9_.|-]*)\)\$$/.exec(pattern || '');
  if (!m) return null;
  const names = m[1].split('|').filter(Boolean);
  return names.length ? names : null;
}

let doc = null;
/** /openapi.json, once per page (answered 304 by ETag on the next load). */
export async function loadDoc() {
  doc = doc || getFresh('/openapi.json');
  return doc;
}

/** The voices the server speaks with (the speech form's enum), or []. */
export async function loadVoices() {
  const d = await loadDoc();
  for (const schema of Object.values(d.components.schemas)) {
    const v = schema.properties?.voice;
    if (v && (v.enum || (v.anyOf?.find((x) => x.enum)))) return v.enum || v.anyOf.find((x) => x.enum).enum;
  }
  return [];
}

/** [{name, label, help, group, type, choices, minimum, maximum, default, autoLabel}] in the server's order. */
export async function loadSettings() {
  const d = await loadDoc();
  const form = d.components.schemas.RenderForm;
  const out = [];
  for (const [name, prop] of Object.entries(form.properties)) {
    if (!prop['x-group']) continue; // an input (avatar, audio, ...), not a setting
    const k = kindOf(prop);
    out.push({
      name,
      label: prop.title || name,
      help: prop.description || '',
      group: prop['x-group'],
      type: k.type, // boolean | integer | number | string
      choices: k.enum || null,
      minimum: k.minimum ?? null,
      maximum: k.maximum ?? null,
      default: prop['x-ui-default'] ?? prop.default ?? null,
      apiDefault: prop.default ?? null,
      nullable: k.nullable || (k.enum !== null && k.enum !== undefined && prop.default === ''),
      autoLabel: prop['x-auto-label'] || '',
    });
  }
  return out;
}

/** The form fields to send: the settings that differ from the API's own default. */
export function changedSettings(specs, values) {
  const out = {};
  for (const s of specs) {
    const v = values[s.name];
    if (v === undefined || v === s.apiDefault) continue;
    if ((v === null || v === '') && s.apiDefault === null) continue;
    out[s.name] = v === null ? '' : v;
  }
  return out;
}

/** The settings that differ from what the page starts with (its defaults): what the URL keeps. */
export function uiChanges(specs, values) {
  const out = {};
  for (const s of specs) {
    const v = values[s.name];
    if (v === undefined || v === s.default || ((v === null || v === '') && (s.default === null || s.default === ''))) continue;
    out[s.name] = v;
  }
  return out;
}

/** The setting a server's sentence is about ("fps: must be ..." or "... (fps)"), or null. */
export function fieldOf(sentence, specs) {
  const head = /^'?([a-z_]+)'?[:\s]/.exec(sentence); // "crf: ..." or the API's "'crf': ..."
  if (head && specs.some((s) => s.name === head[1])) return head[1];
  const named = specs.find((s) => new RegExp(`\\b${s.name}\\b`).test(sentence) && s.name.includes('_'));
  return named ? named.name : null;
}
