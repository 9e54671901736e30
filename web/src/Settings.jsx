// The render settings form, made at run time from the server's RenderForm schema: each field's
// label, help, choices, range and default are the server's.
const title = (group) => group.charAt(0).toUpperCase() + group.slice(1);

// Presentation only: what a producer sets first (the output: delivery, picture, captions) in front,
// the engine's internals behind "Advanced". The fields themselves are the server's.
const PICTURE = ['fps', 'canvas', 'fit', 'scale', 'offset_x', 'offset_y', 'background', 'placement'];
const ADVANCED = 'engine';
const none = (spec) => spec.autoLabel || (spec.default === '' || spec.apiDefault === '' ? 'none' : 'auto');

/** [{key, title, open, specs}]: the output group (with the picture settings) first, Advanced last. */
export function sections(specs) {
  const groupOf = (s) => (PICTURE.includes(s.name) ? 'output' : s.group);
  const order = [...new Set(['output', ...specs.map(groupOf)])].filter((g) => g !== ADVANCED);
  if (specs.some((s) => groupOf(s) === ADVANCED)) order.push(ADVANCED);
  return order
    .map((g) => ({
      key: g,
      title: g === ADVANCED ? 'Advanced (engine)' : title(g),
      open: g !== ADVANCED,
      specs: specs.filter((s) => groupOf(s) === g).sort((a, b) => (g === 'output' ? rank(a) - rank(b) : 0)),
    }))
    .filter((x) => x.specs.length);
}
const rank = (s) => (s.name === 'delivery' ? 0 : PICTURE.includes(s.name) ? 1 + PICTURE.indexOf(s.name) : 20);

function Field({ spec, value, onChange, disabled, error }) {
  const id = `setting-${spec.name}`;
  const help = `${id}-help`;
  const err = `${id}-error`;
  const common = {
    id,
    name: spec.name,
    disabled,
    'aria-describedby': error ? `${err} ${help}` : help,
    'aria-invalid': error ? 'true' : undefined,
  };
  let input;
  if (spec.type === 'boolean') {
    input = <input type="checkbox" {...common} checked={Boolean(value)} onChange={(e) => onChange(e.currentTarget.checked)} />;
  } else if (spec.choices) {
    input = (
      <select {...common} value={value ?? ''} onChange={(e) => onChange(e.currentTarget.value)}>
        {spec.nullable && <option value="">{none(spec)}</option>}
        {spec.choices.map((c) => (
          <option key={c} value={c}>
            {c}
          </option>
        ))}
      </select>
    );
  } else if (spec.type === 'integer' || spec.type === 'number') {
    input = (
      <input
        type="number"
        {...common}
        min={spec.minimum ?? undefined}
        max={spec.maximum ?? undefined}
        step={spec.type === 'integer' ? 1 : 'any'}
        placeholder={spec.nullable ? spec.autoLabel || 'auto' : undefined}
        value={value ?? ''}
        onChange={(e) => {
          const raw = e.currentTarget.value;
          if (raw === '') onChange(spec.nullable ? null : spec.default);
          else onChange(spec.type === 'integer' ? parseInt(raw, 10) : parseFloat(raw));
        }}
      />
    );
  } else {
    input = (
      <input
        type="text"
        {...common}
        placeholder={spec.nullable ? spec.autoLabel || 'auto' : undefined}
        value={value ?? ''}
        onChange={(e) => onChange(e.currentTarget.value === '' && spec.nullable ? null : e.currentTarget.value)}
      />
    );
  }
  const range =
    spec.minimum !== null || spec.maximum !== null ? ` (${spec.minimum ?? '…'} to ${spec.maximum ?? '…'})` : '';
  return (
    <div class={`field ${spec.type === 'boolean' ? 'check' : ''}`}>
      <label for={id}>{spec.label}</label>
      {input}
      {error && (
        <small id={err} class="error" data-testid={`error-${spec.name}`}>
          {error}
        </small>
      )}
      <small id={help} class="help">
        {spec.help}
        {range}
      </small>
    </div>
  );
}

export function Settings({ specs, values, onChange, disabled, errors = {} }) {
  return (
    <form class="settings" aria-label="Render settings" onSubmit={(e) => e.preventDefault()}>
      {sections(specs).map((g) => (
        <details key={g.key} open={g.open || g.specs.some((s) => errors[s.name])}>
          <summary>{g.title}</summary>
          <fieldset disabled={disabled}>
            <legend class="sr-only">{g.title}</legend>
            {g.specs.map((s) => (
              <Field
                key={s.name}
                spec={s}
                value={values[s.name]}
                error={errors[s.name]}
                disabled={disabled}
                onChange={(v) => onChange((o) => ({ ...o, [s.name]: v }))}
              />
            ))}
          </fieldset>
        </details>
      ))}
    </form>
  );
}
