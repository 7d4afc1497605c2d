// A conversation with a local model through the Vercel AI SDK: keepquant runs the model in this process.
// Usage: node index.mjs [path/to/model.gguf]   (default: the embedded model of @keepquant/default-model)
import { generateObject, generateText, streamText, tool } from "ai";
import { keepquant } from "@keepquant/ai-sdk";
import { z } from "zod";

const model = keepquant(process.argv[2] ?? "default");
const system = "You answer with a fortune.";
const messages = [{ role: "user", content: "Tell me a fortune." }];

// 1. one answer, with its usage and finish reason
const first = await generateText({ model, system, messages, maxOutputTokens: 48 });
console.log(`assistant: ${first.text}`);
console.log(`usage: ${first.usage.inputTokens} prompt tokens, ${first.usage.outputTokens} output tokens; finish: ${first.finishReason}`);

// 2. the conversation goes on, streamed token by token
messages.push({ role: "assistant", content: first.text }, { role: "user", content: "And another one." });
const second = streamText({ model, system, messages, maxOutputTokens: 48 });
process.stdout.write("assistant (streamed): ");
let deltas = 0;
for await (const delta of second.textStream) {
  process.stdout.write(delta);
  deltas++;
}
console.log(`\nstreamed in ${deltas} deltas; finish: ${await second.finishReason}`);

// 3. three questions at once share the one engine (its scheduler batches them)
const questions = ["What is love?", "Why is the sky blue?", "Say something wise."];
const answers = await Promise.all(questions.map((prompt) => generateText({ model, prompt, maxOutputTokens: 24 })));
answers.forEach((answer, i) => console.log(`${questions[i]} -> ${answer.text.split("\n")[0]}`));

// 4. structured output: the engine's constrained decoding keeps the answer valid for the schema
const mood = z.object({ mood: z.enum(["happy", "sad", "calm"]), lucky: z.boolean() });
const { object } = await generateObject({ model, schema: mood, prompt: "How do you feel today?", maxOutputTokens: 60 });
console.log(`object: ${JSON.stringify(object)}`);

// 5. a tool call in the model's own format, its input checked against the tool's schema, executed by the SDK
const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.enum(["Oslo", "Paris", "Lima"]) }),
  execute: async ({ city }) => ({ city, celsius: city === "Oslo" ? -3 : 18 }),
});
const called = await generateText({ model, prompt: "Weather in Oslo?", tools: { weather }, toolChoice: "required", maxOutputTokens: 80 });
for (const result of called.toolResults)
  console.log(`tool ${result.toolName}(${JSON.stringify(result.input)}) -> ${JSON.stringify(result.output)}`);

// 6. an answer cut short: the request is cancelled inside the engine and its memory goes back to the pool
const controller = new AbortController();
const cut = streamText({ model, prompt: "Tell me a long story.", maxOutputTokens: 500, abortSignal: controller.signal });
let received = 0;
for await (const part of cut.fullStream) {
  if (part.type === "text-delta" && ++received === 5) controller.abort();
  if (part.type === "abort") console.log(`aborted after ${received} deltas`);
}
const { kv } = (await model.engine()).stats();
console.log(`KV blocks free after the calls: ${kv.blocksFree} of ${kv.blocksTotal}`);

await keepquant.dispose();
