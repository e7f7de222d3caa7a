// Bundles page/use_chat.jsx for one AI SDK generation, for the browser tests (no CDN;
// the bundle goes where the test says, never into the repository).
// node page/build.mjs <generation 6|7> <outfile>
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('..', import.meta.url));
const [generation, outfile] = process.argv.slice(2);
// Generation 6 is installed under aliases; every import of `ai` (the page's and
// @ai-sdk/react's own) resolves to it, so the page runs one copy of each package.
const ALIASES = {
  6: { ai: `${here}node_modules/ai6`, '@ai-sdk/react': `${here}node_modules/@ai-sdk/react3` },
  7: {},
};
if (!(generation in ALIASES)) throw new Error(`generation must be 6 or 7, not ${generation}`);

await build({
  entryPoints: [`${here}page/use_chat.jsx`],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  jsx: 'automatic',
  define: { 'process.env.NODE_ENV': '"production"' },
  alias: ALIASES[generation],
  outfile,
  absWorkingDir: here,
  logLevel: 'warning',
});
