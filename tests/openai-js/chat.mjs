// The openai npm package's chat client against mgt serve (tests/chat_train.sh):
// node chat.mjs PORT MESSAGES_JSON WANT_FILE MAX_TOKENS
// - chat.completions.create at temperature 0 answers WANT_FILE's text (mgt generate --greedy on
//   the rendered conversation), as an assistant message;
// - the same as a stream gives the role first and then the same text in pieces;
// - a conversation the chat format refuses is the client's BadRequestError (400).
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [port, messagesJson, wantFile, maxTokens] = process.argv.slice(2);
const messages = JSON.parse(messagesJson);
const want = readFileSync(wantFile, "utf8");
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
const fail = (what) => { console.log(`FAIL: openai chat client: ${what}`); process.exitCode = 1; };
const model = (await client.models.list()).data[0].id;
const max_tokens = Number(maxTokens);

const r = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0 });
const m = r.choices[0].message;
if (m.role !== "assistant" || m.content !== want) fail(`greedy ${JSON.stringify(m)} != ${JSON.stringify(want)}`);
else console.log(`ok: openai chat.completions.create answers as mgt generate --greedy (${r.choices[0].finish_reason})`);

const stream = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0, stream: true });
let text = "", role = null, chunks = 0;
for await (const ch of stream) {
  const d = ch.choices[0].delta;
  if (chunks === 0) role = d.role;
  text += d.content ?? "";
  chunks++;
}
if (text !== want || role !== "assistant") fail(`stream ${JSON.stringify(text)} (role ${role})`);
else console.log(`ok: openai chat stream: ${chunks} chunks, the role first, the same text`);

try {
  await client.chat.completions.create({ model, messages: [{ role: "assistant", content: "hi" }] });
  fail("accepted a conversation that starts with the assistant");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError)) fail(`${e}`);
  else console.log(`ok: openai chat client raises BadRequestError: ${e.message}`);
}
