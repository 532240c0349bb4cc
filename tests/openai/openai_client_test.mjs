// End-to-end: the official `openai` npm client against a running expertd
// (zoo model, Qwen3's chat template via --chat_template, an API key). Run by
// openai_client_test.sh under Bazel; node_modules come from tools/setup.sh
// (`npm ci` of the committed package-lock.json).
//
// Every wait is on a condition with a deadline that fails the test.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';

const EXPERTD = process.env.EXPERTD;
const MODEL_DIR = process.env.MODEL_DIR;
const TEMPLATE_CONFIG = process.env.TEMPLATE_CONFIG;
const TMP = process.env.TEST_TMPDIR || fs.mkdtempSync('/tmp/openai-e2e-');
const API_KEY = 'sk-expertd-test-0123456789abcdef';
const MODEL = 'zoo';

async function until(what, predicate, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Starts expertd; resolves once the model is ready, with its HTTP and metrics ports.
async function startDaemon(tag, extraFlags = []) {
  const template = path.join(TMP, `${tag}.jinja`);
  fs.writeFileSync(template, JSON.parse(fs.readFileSync(TEMPLATE_CONFIG, 'utf8')).chat_template);
  const keyFile = path.join(TMP, `${tag}.key`);
  fs.writeFileSync(keyFile, `${API_KEY}\n`);
  const child = spawn(EXPERTD, [
    `--model_dir=${MODEL_DIR}`, `--model_name=${MODEL}`, '--listen=127.0.0.1:0',
    '--http_listen=127.0.0.1:0', '--metrics_listen=127.0.0.1:0', `--chat_template=${template}`,
    `--api_key_file=${keyFile}`, '--log_format=json', ...extraFlags,
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  const daemon = { child, lines: [], exited: false };
  child.on('exit', () => { daemon.exited = true; });
  for (const stream of [child.stdout, child.stderr]) {
    let buffer = '';
    stream.on('data', (d) => {
      buffer += d;
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        daemon.lines.push(buffer.slice(0, nl));
        buffer = buffer.slice(nl + 1);
      }
    });
  }
  const find = (msg) => daemon.lines.map((l) => { try { return JSON.parse(l); } catch { return null; } })
    .find((j) => j && j.msg === msg);
  await until(`${tag} ready`, () => {
    if (daemon.exited) throw new Error(`expertd exited:\n${daemon.lines.join('\n')}`);
    return find('model ready');
  });
  daemon.httpPort = find('openai http listening').port;
  daemon.metricsPort = find('metrics listening').port;
  daemon.baseURL = `http://127.0.0.1:${daemon.httpPort}/v1`;
  daemon.client = new OpenAI({ apiKey: API_KEY, baseURL: daemon.baseURL, maxRetries: 0 });
  return daemon;
}

async function stopDaemon(daemon) {
  if (!daemon || daemon.exited) return;
  daemon.child.kill('SIGTERM');
  await until('expertd exit', () => daemon.exited);
}

async function metric(daemon, name, labelFilter = '') {
  const text = await (await fetch(`http://127.0.0.1:${daemon.metricsPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name) && l.includes(labelFilter));
  assert.ok(line, `metric ${name}${labelFilter} missing`);
  return Number(line.split(' ').pop());
}

describe('expertd OpenAI API with the official client', () => {
  let d;
  before(async () => { d = await startDaemon('main'); });
  after(async () => { await stopDaemon(d); });

  test('models.list names the served model', async () => {
    const models = await d.client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
    assert.equal(models.data[0].object, 'model');
  });

  test('completions: greedy text, usage, finish_reason', async () => {
    const r = await d.client.completions.create({
      model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.usage.completion_tokens, 8);
    assert.ok(r.usage.prompt_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
    const again = await d.client.completions.create({
      model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0,
    });
    assert.equal(again.choices[0].text, r.choices[0].text);
  });

  test('chat: the template renders the conversation; streaming gives the same greedy text', async () => {
    const params = {
      model: MODEL, max_tokens: 10, temperature: 0,
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Héllo 🤖' }],
    };
    const r = await d.client.chat.completions.create(params);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(r.usage.completion_tokens, 10);
    // The Qwen3 template's rendering of this conversation, tokenized: many more
    // tokens than the user text alone.
    assert.ok(r.usage.prompt_tokens > 10);

    const stream = await d.client.chat.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let role = null;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        if (c.delta.content) text += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, r.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.deepEqual(usage, r.usage);
  });

  test('completions streaming matches the non-streaming text', async () => {
    const params = { model: MODEL, prompt: 'The river', max_tokens: 12, temperature: 0 };
    const whole = await d.client.completions.create(params);
    let text = '';
    for await (const chunk of await d.client.completions.create({ ...params, stream: true })) {
      text += chunk.choices.map((c) => c.text).join('');
    }
    assert.equal(text, whole.choices[0].text);
  });

  test('n > 1: n choices, reproducible with a seed', async () => {
    const params = { model: MODEL, prompt: 'A', max_tokens: 6, temperature: 1, n: 3, seed: 42 };
    const a = await d.client.completions.create(params);
    const b = await d.client.completions.create(params);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.equal(a.usage.completion_tokens, 18);
    const chat = await d.client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 4, n: 2,
    });
    assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
  });

  test('logprobs: chat top_logprobs and completions logprobs', async () => {
    const r = await d.client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Count' }], max_tokens: 5, temperature: 0,
      logprobs: true, top_logprobs: 3,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    for (const t of content) {
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.logprob <= 0);
      // Greedy: the chosen token is the most likely one.
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
      assert.ok(Array.isArray(t.bytes));
    }
    const c = await d.client.completions.create({
      model: MODEL, prompt: 'Count', max_tokens: 4, temperature: 0, logprobs: 2,
    });
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(lp.top_logprobs[0] && Object.keys(lp.top_logprobs[0]).length, 2);
    assert.equal(lp.tokens.join(''), c.choices[0].text);
  });

  test('errors: OpenAI shape and HTTP status', async () => {
    const wrongKey = new OpenAI({ apiKey: 'sk-wrong', baseURL: d.baseURL, maxRetries: 0 });
    await assert.rejects(wrongKey.models.list(), (e) => e.status === 401 && e.code === 'invalid_api_key');
    await assert.rejects(
      d.client.completions.create({ model: 'no-such-model', prompt: 'x' }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found' && e.param === 'model');
    await assert.rejects(
      d.client.completions.create({ model: MODEL, prompt: 'x', temperature: 5 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
    await assert.rejects(
      d.client.chat.completions.create({ model: MODEL, messages: [] }),
      (e) => e.status === 400 && e.param === 'messages');
    await assert.rejects(
      d.client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 100000 }),
      (e) => e.status === 400 && e.param === 'max_tokens');
    await assert.rejects(
      d.client.chat.completions.create({ model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }),
      (e) => e.status === 400 && e.param === 'messages');
  });

  test('client disconnect mid-stream aborts the sequence and frees its KV blocks', async () => {
    const abortsBefore = await metric(d, 'expertd:request_success_total', 'finished_reason="abort"');
    const controller = new AbortController();
    const stream = await d.client.completions.create(
      { model: MODEL, prompt: 'Long story', max_tokens: 3000, temperature: 0, stream: true },
      { signal: controller.signal });
    let chunks = 0;
    try {
      for await (const chunk of stream) {
        assert.equal(chunk.object, 'text_completion');
        if (++chunks === 3) {
          assert.ok(await metric(d, 'expertd:num_requests_running') >= 1);
          controller.abort();  // closes the connection
          break;
        }
      }
    } catch (e) {
      assert.equal(e.name, 'APIUserAbortError');
    }
    assert.equal(chunks, 3);
    await until('the abort in /metrics', async () =>
      (await metric(d, 'expertd:request_success_total', 'finished_reason="abort"')) === abortsBefore + 1);
    await until('no running sequence', async () => (await metric(d, 'expertd:num_requests_running')) === 0);
    assert.equal(await metric(d, 'expertd:kv_cache_usage_perc'), 0);
  });

  test('client disconnect before a non-streaming answer aborts the sequence and frees its KV blocks', async () => {
    const abortsBefore = await metric(d, 'expertd:request_success_total', 'finished_reason="abort"');
    const controller = new AbortController();
    const pending = d.client.completions.create(
      { model: MODEL, prompt: 'Long story', max_tokens: 3000, temperature: 0 },
      { signal: controller.signal });
    await until('the request running', async () => (await metric(d, 'expertd:num_requests_running')) === 1);
    controller.abort();  // closes the connection; the server has written nothing yet
    await assert.rejects(pending, (e) => e instanceof OpenAI.APIUserAbortError);
    await until('the abort in /metrics', async () =>
      (await metric(d, 'expertd:request_success_total', 'finished_reason="abort"')) === abortsBefore + 1);
    await until('no running sequence', async () => (await metric(d, 'expertd:num_requests_running')) === 0);
    assert.equal(await metric(d, 'expertd:kv_cache_usage_perc'), 0);
  });
});

describe('overload and drain', () => {
  let d;
  before(async () => {
    d = await startDaemon('small', ['--max_running_requests=1', '--max_queue_length=1',
      '--shutdown_grace_seconds=30']);
  });
  after(async () => { await stopDaemon(d); });

  test('429 with Retry-After when the queue is full, then 503 while draining', async () => {
    const long = () => d.client.completions.create(
      { model: MODEL, prompt: 'Busy', max_tokens: 3000, temperature: 0, stream: true });
    const running = await long();  // runs
    const iterator = running[Symbol.asyncIterator]();
    await iterator.next();
    const queued = await long();   // waits in the queue (max_queue_length=1)
    await until('one waiting', async () => (await metric(d, 'expertd:num_requests_waiting')) === 1);
    const raw = await fetch(`${d.baseURL}/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 2 }),
    });
    assert.equal(raw.status, 429);
    assert.equal(raw.headers.get('retry-after'), '1');
    const body = await raw.json();
    assert.equal(body.error.code, 'rate_limit_exceeded');

    d.child.kill('SIGTERM');  // drain: in-flight streams keep going, new requests get 503
    await until('503 while draining', async () => {
      const r = await fetch(`${d.baseURL}/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${API_KEY}` },
        body: JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 2 }),
      });
      return r.status === 503 && (await r.json()).error.type === 'service_unavailable';
    });
    const next = await iterator.next();
    assert.equal(next.done, false);  // the running stream is still served during the grace period
    queued.controller.abort();
    running.controller.abort();
  });
});
