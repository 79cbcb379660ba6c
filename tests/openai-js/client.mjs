// The openai npm package's client against mgt serve (tests/serve.sh):
// node client.mjs PORT PROMPT GREEDY_FILE
// - models.list names the served model;
// - completions.create at temperature 0 continues PROMPT as mgt generate --greedy did;
// - the same as a stream (async iteration over its events) gives the same text;
// - a bad request is the client's BadRequestError (400), an unknown model NotFoundError (404).
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const version = JSON.parse(readFileSync(new URL("./node_modules/openai/package.json", import.meta.url))).version;

const [port, prompt, greedyFile] = process.argv.slice(2);
const want = readFileSync(greedyFile, "utf8").slice(prompt.length, -1);
const maxTokens = Buffer.byteLength(want); // byte tokens
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
const fail = (what) => { console.log(`FAIL: openai client: ${what}`); process.exitCode = 1; };

const models = await client.models.list();
const model = models.data[0].id;
if (models.data.length !== 1 || !model) fail(`models.list: ${JSON.stringify(models.data)}`);

const r = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0 });
if (r.choices[0].text !== want) fail(`greedy ${JSON.stringify(r.choices[0].text)} != ${JSON.stringify(want)}`);
else console.log(`ok: openai ${version} completions.create (model ${model}) equals mgt generate --greedy`);

const stream = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0, stream: true });
let text = "", events = 0, finish = null;
for await (const ev of stream) {
  text += ev.choices[0].text;
  events++;
  finish = ev.choices[0].finish_reason ?? finish;
}
if (text !== want || finish !== "length") fail(`stream ${JSON.stringify(text)} (${finish})`);
else console.log(`ok: openai client's stream: ${events} events, the same text, finish_reason ${finish}`);

for (const [body, cls, code] of [[{ model, prompt, max_tokens: -1 }, OpenAI.BadRequestError, 400],
                                 [{ model: "no-such-model", prompt }, OpenAI.NotFoundError, 404]]) {
  try {
    await client.completions.create(body);
    fail(`accepted ${JSON.stringify(body)}`);
  } catch (e) {
    if (!(e instanceof cls) || e.status !== code || !e.message) fail(`${JSON.stringify(body)}: ${e}`);
    else console.log(`ok: openai client raises ${cls.name} (${code}): ${e.message}`);
  }
}
