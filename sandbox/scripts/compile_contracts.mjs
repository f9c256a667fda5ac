#!/usr/bin/env node
// Compile contracts/*.sol with the pinned npm `solc` and write one artifact per
// contract to x402_eur_sandbox/contracts/<Name>.json (paths relative to sandbox/).
// Also write Permit2.json: Uniswap's Permit2 runtime bytecode (MIT), as published
// precompiled in the npm package @uniswap/v4-periphery (lib/permit2/test/utils/
// DeployPermit2.sol), which the sandbox sets at Permit2's canonical address.
//
// Usage:
//   node sandbox/scripts/compile_contracts.mjs           # (re)write the artifacts
//   node sandbox/scripts/compile_contracts.mjs --check   # exit 1 if an artifact is stale
//
// The settings are fixed (optimizer runs, EVM version, no metadata hash) so a
// fresh compile is byte-for-byte equal to the committed artifact.

import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const CONTRACTS_DIR = path.join(ROOT, "contracts");
const OUT_DIR = path.join(ROOT, "x402_eur_sandbox", "contracts");

let solc;
try {
  solc = require("solc");
} catch {
  console.error("solc is not installed: run `npm ci` in the project root");
  process.exit(2);
}

const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  metadata: { bytecodeHash: "none", appendCBOR: true },
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
};

function compilerVersion() {
  // "0.8.30+commit.73712a01.Emscripten.clang" -> "0.8.30+commit.73712a01"
  const m = /^(\d+\.\d+\.\d+\+commit\.[0-9a-f]+)/.exec(solc.version());
  return m ? m[1] : solc.version();
}

function findImports(importPath) {
  // Resolve library imports such as "@openzeppelin/contracts/..." from node_modules.
  let dir = ROOT;
  for (;;) {
    const candidate = path.join(dir, "node_modules", importPath);
    if (existsSync(candidate)) {
      return { contents: readFileSync(candidate, "utf8") };
    }
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return { error: `import not found: ${importPath} (run \`npm ci\`)` };
}

function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) out[key] = sortKeys(value[key]);
    return out;
  }
  return value;
}

function compileAll() {
  const files = readdirSync(CONTRACTS_DIR)
    .filter((f) => f.endsWith(".sol"))
    .sort();
  const sources = {};
  const rawSources = {};
  for (const file of files) {
    const unit = `contracts/${file}`;
    const raw = readFileSync(path.join(CONTRACTS_DIR, file));
    rawSources[unit] = raw;
    sources[unit] = { content: raw.toString("utf8") };
  }
  const input = { language: "Solidity", sources, settings: SETTINGS };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const errors = (output.errors || []).filter((e) => e.severity === "error");
  for (const e of output.errors || []) {
    if (e.severity !== "error") console.warn(e.formattedMessage || e.message);
  }
  if (errors.length > 0) {
    for (const e of errors) console.error(e.formattedMessage || e.message);
    process.exit(1);
  }

  const artifacts = {};
  for (const file of files) {
    const unit = `contracts/${file}`;
    const name = path.basename(file, ".sol");
    const contract = output.contracts?.[unit]?.[name];
    if (!contract) {
      console.error(`${unit} does not define a contract named ${name}`);
      process.exit(1);
    }
    const artifact = {
      contractName: name,
      abi: contract.abi,
      bytecode: `0x${contract.evm.bytecode.object}`,
      compiler: compilerVersion(),
      sourceSha256: createHash("sha256").update(rawSources[unit]).digest("hex"),
    };
    artifacts[`${name}.json`] = `${JSON.stringify(sortKeys(artifact), null, 2)}\n`;
  }
  return artifacts;
}

const PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
const PERMIT2_SOURCE = "@uniswap/v4-periphery/lib/permit2/test/utils/DeployPermit2.sol";

function permit2Artifact() {
  const found = findImports(PERMIT2_SOURCE);
  if (found.error) {
    console.error(found.error);
    process.exit(1);
  }
  const match = /bytes memory bytecode =\s*hex"([0-9a-f]+)"/.exec(found.contents);
  if (!match) {
    console.error(`${PERMIT2_SOURCE} holds no bytecode literal`);
    process.exit(1);
  }
  const version = JSON.parse(findImports("@uniswap/v4-periphery/package.json").contents).version;
  const artifact = {
    contractName: "Permit2",
    address: PERMIT2_ADDRESS,
    runtimeBytecode: `0x${match[1]}`,
    source: `${PERMIT2_SOURCE} (@uniswap/v4-periphery ${version})`,
    license: "MIT (Uniswap Labs)",
    sourceSha256: createHash("sha256").update(found.contents).digest("hex"),
  };
  return `${JSON.stringify(sortKeys(artifact), null, 2)}\n`;
}

function main() {
  const check = process.argv.includes("--check");
  const artifacts = compileAll();
  artifacts["Permit2.json"] = permit2Artifact();
  let stale = 0;
  for (const [fileName, text] of Object.entries(artifacts)) {
    const outPath = path.join(OUT_DIR, fileName);
    const rel = path.relative(ROOT, outPath);
    if (check) {
      const current = existsSync(outPath) ? readFileSync(outPath, "utf8") : null;
      if (current !== text) {
        stale += 1;
        console.error(
          current === null
            ? `${rel} is missing: run \`node sandbox/scripts/compile_contracts.mjs\``
            : `${rel} differs from a fresh compile: run \`node sandbox/scripts/compile_contracts.mjs\``,
        );
      }
    } else {
      writeFileSync(outPath, text);
      console.log(`wrote ${rel}`);
    }
  }
  if (check) {
    if (stale > 0) process.exit(1);
    console.log(`contract artifacts up to date (${Object.keys(artifacts).length}, solc ${compilerVersion()})`);
  }
}

main();
