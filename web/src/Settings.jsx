// The render settings form, made at run time from the server's RenderForm schema: each field's
// label, help, choices, range and default are the server's.
const title = (group) => group.charAt(0).toUpperCase() + group.slice(1);

function Field({ spec, value, onChange, disabled }) {
  const id = `setting-${spec.name}`;
  const help = `${id}-help`;
  const common = { id, name: spec.name, disabled, 'aria-describedby': help };
  let input;
  if (spec.type === 'boolean') {
    input = <input type="checkbox" {...common} checked={Boolean(value)} onChange={(e) => onChange(e.currentTarget.checked)} />;
  } else if (spec.choices) {
    input = (
      <select {...common} value={value ?? ''} onChange={(e) => onChange(e.currentTarget.value)}>
        {spec.nullable && <option value="">{spec.autoLabel || 'auto'}</option>}
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
      <small id={help} class="help">
        {spec.help}
        {range}
      </small>
    </div>
  );
}

export function Settings({ specs, values, onChange, disabled }) {
  const groups = [...new Set(specs.map((s) => s.group))];
  return (
    <form class="settings" aria-label="Render settings" onSubmit={(e) => e.preventDefault()}>
      {groups.map((g) => (
        <details key={g} open={g !== 'engine'}>
          <summary>{title(g)}</summary>
          <fieldset disabled={disabled}>
            <legend class="sr-only">{title(g)}</legend>
            {specs
              .filter((s) => s.group === g)
              .map((s) => (
                <Field key={s.name} spec={s} value={values[s.name]} disabled={disabled} onChange={(v) => onChange((o) => ({ ...o, [s.name]: v }))} />
              ))}
          </fieldset>
        </details>
      ))}
    </form>
  );
}
