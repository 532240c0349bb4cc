#!/usr/bin/env node
// Times Hugging Face `tokenizers` (Node binding over the Rust library) encoding
// the same ~1 MB text as //models/tokenizer:tokenizer_benchmark.
//
//   cd tools/oracle && node bench.js [iterations]
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
    if (e.text === undefined || e.name.startsWith('long_')) continue;
    base += e.text + '\n';
  }
  let out = '';
  while (Buffer.byteLength(out) < bytes) out += base;
  return out;
}

async function main() {
  const iters = Number(process.argv[2] || 10);
  const text = benchText(1 << 20);
  const mb = Buffer.byteLength(text) / 1e6;
  for (const name of ['llama3', 'llama2', 'qwen3', 'deepseek_v3']) {
    const tok = Tokenizer.fromFile(path.join(DATA, name, 'tokenizer.json'));
    const t0 = process.hrtime.bigint();
    const first = await tok.encode(text, null, { addSpecialTokens: false });
    const cold = Number(process.hrtime.bigint() - t0) / 1e9;
    let best = Infinity;
    let total = 0;
    for (let i = 0; i < iters; i++) {
      const s = process.hrtime.bigint();
      await tok.encode(text, null, { addSpecialTokens: false });
      const dt = Number(process.hrtime.bigint() - s) / 1e9;
      best = Math.min(best, dt);
      total += dt;
    }
    console.log(`${name}: ${first.getIds().length} tokens, ${mb.toFixed(3)} MB; cold ${(mb / cold).toFixed(2)} MB/s; ` +
                `warm mean ${(mb * iters / total).toFixed(2)} MB/s, best ${(mb / best).toFixed(2)} MB/s`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
