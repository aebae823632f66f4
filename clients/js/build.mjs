// Builds the SDK into one ES module: the worklet first, embedded as a string, then the rest.
// `node build.mjs` writes dist/voiceserver.js and the copy the server serves;
// `node build.mjs --check` fails when that copy differs from what the sources build;
// `node build.mjs --tests` bundles test/unit/*.test.ts into build/tests/.
import { build } from "esbuild";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const served = join(here, "..", "..", "voiceserver", "web", "sdk", "voiceserver.js");
const banner = "// voiceserver browser SDK, built from clients/js (node build.mjs). Do not edit.\n";

async function bundle(entry, options = {}) {
  const result = await build({
    entryPoints: [join(here, entry)],
    bundle: true,
    write: false,
    format: "esm",
    target: "es2022",
    legalComments: "none",
    logLevel: "warning",
    ...options,
  });
  return result.outputFiles[0].text;
}

async function sdk() {
  const worklet = await bundle("src/worklet.ts", { format: "iife" });
  return banner + (await bundle("src/index.ts", { define: { __WORKLET_SOURCE__: JSON.stringify(worklet) } }));
}

async function tests() {
  const dir = join(here, "test", "unit");
  const out = join(here, "build", "tests");
  mkdirSync(out, { recursive: true });
  const worklet = await bundle("src/worklet.ts", { format: "iife" });
  for (const name of readdirSync(dir).filter((f) => f.endsWith(".test.ts"))) {
    const code = await bundle(join("test", "unit", name), {
      platform: "node",
      define: { __WORKLET_SOURCE__: JSON.stringify(worklet) },
    });
    writeFileSync(join(out, name.replace(/\.ts$/, ".mjs")), code);
  }
}

const mode = process.argv[2];
if (mode === "--tests") {
  await tests();
} else if (mode === "--check") {
  const fresh = await sdk();
  if (readFileSync(served, "utf8") !== fresh) {
    console.error(`${served} does not match clients/js/src: run \`npm run build\` in clients/js and commit it`);
    process.exit(1);
  }
} else {
  const code = await sdk();
  mkdirSync(join(here, "dist"), { recursive: true });
  mkdirSync(dirname(served), { recursive: true });
  writeFileSync(join(here, "dist", "voiceserver.js"), code);
  writeFileSync(served, code);
}
