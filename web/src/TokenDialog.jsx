import { useState } from 'preact/hooks';

/** The server needs a token: asked once, kept for this tab (sessionStorage). */
export function TokenDialog({ error, onToken }) {
  const [value, setValue] = useState('');
  return (
    <main class="token">
      <form
        class="card"
        onSubmit={(e) => {
          e.preventDefault();
          if (value.trim()) onToken(value.trim());
        }}
      >
        <h1>Studio</h1>
        <p>This server needs its token (the one <code>studio serve --token</code> was given, or a read-only one).</p>
        <label for="token">Server token</label>
        <input id="token" type="password" autocomplete="off" autofocus value={value} onInput={(e) => setValue(e.currentTarget.value)} />
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary">
          Connect
        </button>
        <p class="muted small">Kept in this tab only; closing the tab forgets it.</p>
      </form>
    </main>
  );
}
