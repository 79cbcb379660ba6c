// Reads JSON lines {"text": ...} and writes one line of space-separated ids per text, as
// Hugging Face's Tokenizers.js encodes it without special tokens.
import { Tokenizer } from "@huggingface/tokenizers";
import { readFileSync } from "node:fs";
const [dir, input] = process.argv.slice(2);
const tok = new Tokenizer(JSON.parse(readFileSync(dir + "/tokenizer.json", "utf8")),
  JSON.parse(readFileSync(dir + "/tokenizer_config.json", "utf8")));
const out = [];
for (const line of readFileSync(input, "utf8").split("\n")) {
  if (!line) continue;
  out.push(tok.encode(JSON.parse(line).text, { add_special_tokens: false }).ids.join(" "));
}
process.stdout.write(out.join("\n") + "\n");
