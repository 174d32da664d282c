// Bundles src/ into service/dashboard/static/ (served by service/dashboard/mount.py).
// Hashed file names let the service cache assets forever while index.html is never cached.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = join(here, "..", "service", "dashboard", "static");

rmSync(outdir, { recursive: true, force: true });
mkdirSync(join(outdir, "assets"), { recursive: true });

const result = await build({
  entryPoints: [join(here, "src", "main.js")],
  bundle: true,
  minify: true,
  sourcemap: true,
  format: "esm",
  target: ["chrome110", "firefox115", "safari16"],
  outdir: join(outdir, "assets"),
  entryNames: "[name]-[hash]",
  metafile: true,
  legalComments: "none", // licenses go to THIRD_PARTY_LICENSES.txt below, not into the bundle
  logLevel: "warning",
});

const outputs = Object.keys(result.metafile.outputs).map((p) => relative(outdir, p).split("\\").join("/"));
const js = outputs.find((p) => p.endsWith(".js"));
const css = outputs.find((p) => p.endsWith(".css"));
if (!js || !css) throw new Error(`build produced no js/css: ${outputs.join(", ")}`);

const html = readFileSync(join(here, "src", "index.html"), "utf8")
  .replace("%APP_JS%", js)
  .replace("%APP_CSS%", css);
writeFileSync(join(outdir, "index.html"), html);

// The bundle contains uPlot (MIT): ship its license with it.
const licenses = ["uplot"].map((name) => {
  const text = readFileSync(join(here, "node_modules", name, "LICENSE"), "utf8");
  return `${name}\n${"=".repeat(name.length)}\n${text.trim()}\n`;
});
writeFileSync(join(outdir, "THIRD_PARTY_LICENSES.txt"), licenses.join("\n"));

// Recorded so a test (and a person) can see what was built from what.
const lock = readFileSync(join(here, "package-lock.json"));
writeFileSync(
  join(outdir, "build-info.json"),
  JSON.stringify({ js, css, lock_sha256: createHash("sha256").update(lock).digest("hex") }, null, 2) + "\n",
);
console.log(`dashboard: built ${js} and ${css}`);
