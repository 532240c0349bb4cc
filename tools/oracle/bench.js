#!/usr/bin/env node
// Times Hugging Face `tokenizers` (Node binding over the Rust library) encoding
// the same ~1 MB text as //models/tokenizer:tokenizer_benchmark.
//
//   cd tools/oracle && node bench.js [iterations] [text bytes, default 1 MiB]
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const DATA = path.resolve(__dirname, '../../models/tokenizer/testdata');

function benchText(bytes) {
  const lines = fs.readFileSync(path.join(DATA, 'corpus.jsonl'), 'utf8').split('\n').filter(Boolean);
  let base = '';
  for (const l of lines) {
    const e = JSON.parse(l);
    if (e.text === undefined || e.name.startsWith('long_') || e.name.startsWith('random')) continue;
    base += e.text + '\n';
  }
  let out = '';
  while (Buffer.byteLength(out) < bytes) out += base;
  return out;
}

// The text cut at line ends into chunks of at least `size` UTF-16 units (the
// same cut as the C++ benchmark's chunks, which count bytes of ASCII-heavy text
// similarly; only the throughput matters).
function chunks(text, size) {
  const out = [];
  let cur = '';
  for (const l of text.split('\n')) {
    cur += l + '\n';
    if (cur.length >= size) { out.push(cur); cur = ''; }
  }
  if (cur) out.push(cur);
  return out;
}

// Best (shortest) of `iters` passes over all chunks, in seconds.
async function timeChunks(tok, parts, iters) {
  for (const c of parts) await tok.encode(c, null, { addSpecialTokens: false });
  let best = Infinity;
  for (let i = 0; i < iters; i++) {
    const s = process.hrtime.bigint();
    for (const c of parts) await tok.encode(c, null, { addSpecialTokens: false });
    best = Math.min(best, Number(process.hrtime.bigint() - s) / 1e9);
  }
  return best;
}

async function main() {
  const iters = Number(process.argv[2] || 10);
  const text = benchText(Number(process.argv[3] || (1 << 20)));
  const mb = Buffer.byteLength(text) / 1e6;
  const parts = chunks(text, 4096);
  for (const name of ['llama3', 'llama2', 'qwen3', 'deepseek_v3']) {
    const tok = Tokenizer.fromFile(path.join(DATA, name, 'tokenizer.json'));
    const t0 = process.hrtime.bigint();
    const first = await tok.encode(text, null, { addSpecialTokens: false });
    const cold = Number(process.hrtime.bigint() - t0) / 1e9;
    let best = Infinity;
    let total = 0;
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < iters; i++) {
      const s = process.hrtime.bigint();
      await tok.encode(text, null, { addSpecialTokens: false });
      const dt = Number(process.hrtime.bigint() - s) / 1e9;
      best = Math.min(best, dt);
      total += dt;
    }
    const cpu = process.cpuUsage(cpu0);  // whole process, all threads (HF runs encode off the JS thread)
    const cpuSec = (cpu.user + cpu.system) / 1e6;
    console.log(`${name}: ${first.getIds().length} tokens, ${mb.toFixed(3)} MB; cold ${(mb / cold).toFixed(2)} MB/s; ` +
                `warm mean ${(mb * iters / total).toFixed(2)} MB/s (CPU time: ${(mb * iters / cpuSec).toFixed(2)} MB/s), ` +
                `best ${(mb / best).toFixed(2)} MB/s; ` +
                `as ${parts.length} ~4 KB chunks best ${(mb / await timeChunks(tok, parts, iters)).toFixed(2)} MB/s`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
