// Bundles src/chat.js and the `ai` package it imports into one file the demo serves:
// toolstream/demo/static/chat.js (committed; a test rebuilds it and compares).
// node build.mjs [outfile]
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const outfile = process.argv[2] ?? `${here}../../toolstream/demo/static/chat.js`;

await build({
  entryPoints: [`${here}src/chat.js`],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  minify: true,
  legalComments: 'eof',
  charset: 'utf8',
  outfile,
  absWorkingDir: here,
  logLevel: 'warning',
  banner: {
    js: '// Built by web/chat/build.mjs from web/chat/src/chat.js and the ai package (Apache-2.0); do not edit.',
  },
});
