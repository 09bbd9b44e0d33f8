#!/usr/bin/env node
// Writes the part of forge's build output that the Rust bindings need (ABI, creation and
// runtime bytecode) as small, stable JSON files: `extract-artifacts.js OUT DEST NAME...`.
'use strict';
const fs = require('fs');
const path = require('path');

const [outDir, dest, ...names] = process.argv.slice(2);
if (!outDir || !dest || names.length === 0) {
  process.stderr.write('usage: extract-artifacts.js OUT DEST NAME...\n');
  process.exit(2);
}
for (const name of names) {
  const built = JSON.parse(fs.readFileSync(path.join(outDir, `${name}.sol`, `${name}.json`), 'utf8'));
  const artifact = {
    contractName: name,
    abi: built.abi,
    bytecode: { object: built.bytecode.object },
    deployedBytecode: { object: built.deployedBytecode.object },
  };
  fs.writeFileSync(path.join(dest, `${name}.json`), JSON.stringify(artifact, null, 2) + '\n');
}
