// The page studio serve answers at /: built into the Python package (studio/api/static), so a
// pip-installed Studio serves it without Node. Same origin as the API; nothing from another host.
import { defineConfig } from 'vite';
import preact from '@preact/preset-vite';
import { fileURLToPath } from 'node:url';

export default defineConfig({
  plugins: [preact()],
  base: '/',
  build: {
    outDir: fileURLToPath(new URL('../studio/api/static', import.meta.url)),
    emptyOutDir: true,
    target: 'es2020',
    modulePreload: { polyfill: false }, // the polyfill is an inline script: the CSP allows none
    sourcemap: false,
    reportCompressedSize: false,
  },
  server: { proxy: { '/v1': 'http://127.0.0.1:8321', '/openapi.json': 'http://127.0.0.1:8321' } },
});
