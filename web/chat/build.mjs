// Bundles each page's client and the packages it imports into one file the demo serves
// (committed; a test rebuilds them and compares):
//   src/chat.js      + ai                        -> toolstream/demo/static/chat.js
//   src/usestream.js + @langchain/langgraph-sdk  -> toolstream/demo/static/usestream.js
// (both with src/dom.js, the pages' shared view helpers)
// node build.mjs [outdir]
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const outdir = process.argv[2] ?? `${here}../../toolstream/demo/static`;

const BUNDLES = [
  {
    name: 'chat.js',
    banner: '// Built by web/chat/build.mjs from web/chat/src/chat.js (and dom.js) and the ai package (Apache-2.0); do not edit.',
  },
  {
    name: 'usestream.js',
    banner:
      '// Built by web/chat/build.mjs from web/chat/src/usestream.js (and dom.js) and the @langchain/langgraph-sdk ' +
      'package with what it imports (@langchain/core, langsmith and others; MIT); do not edit.',
  },
];

for (const { name, banner } of BUNDLES) {
  await build({
    entryPoints: [`${here}src/${name}`],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    minify: true,
    legalComments: 'eof',
    charset: 'utf8',
    outfile: `${outdir}/${name}`,
    absWorkingDir: here,
    logLevel: 'warning',
    banner: { js: banner },
  });
}
