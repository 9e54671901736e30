// The render settings as the server declares them: RenderForm in /openapi.json (made on the server
// from the one settings schema). Nothing about a setting is typed in the page.
import { getJson } from './api.js';

function kindOf(prop) {
  const variants = prop.anyOf ? prop.anyOf.filter((p) => p.type !== 'null') : [prop];
  const v = variants[0] || {};
  return { ...v, nullable: Boolean(prop.anyOf && prop.anyOf.some((p) => p.type === 'null')) };
}

/** [{name, label, help, group, type, choices, minimum, maximum, default, autoLabel}] in the server's order. */
export async function loadSettings() {
  const doc = await getJson('/openapi.json');
  const form = doc.components.schemas.RenderForm;
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
      nullable: k.nullable,
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
