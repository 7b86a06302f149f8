// The official `openai` npm client (7.55.0, the schema of record for /v1/decisions) against a
// running `flide serve`: client.decisions.create must be answered in the shape its types
// declare (resources/decisions.d.ts), and refusals must surface as the client's typed errors.
// Usage: node decisions.mjs BASE_URL API_KEY MODEL; prints one JSON line, exit code 0 when all
// checks pass.
import OpenAI from 'openai';

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
}

const isProbability = (p) => typeof p === 'number' && p >= 0 && p <= 1;
const sumsToOne = (ps) => Math.abs(ps.reduce((a, b) => a + b, 0) - 1) < 1e-6;

// Decision.answers[i] as the types declare each variant.
function checkAnswer(answer, question) {
  check(answer.type === question.type, `answer type ${answer.type} for a ${question.type}`);
  check(answer.name === (question.name ?? null), `name ${answer.name}`);
  const keys = Object.keys(answer).sort().join(',');
  if (answer.type === 'predicate') {
    check(keys === 'name,probability,type', `predicate keys ${keys}`);
    check(isProbability(answer.probability), 'predicate probability');
    return;
  }
  check(typeof answer.confidence === 'number' && answer.confidence >= 0 && answer.confidence <= 1,
        'confidence');
  const ps = answer.probabilities.map((p) => p.probability);
  check(ps.every(isProbability) && sumsToOne(ps), 'probabilities sum to 1');
  if (answer.type === 'choice') {
    check(keys === 'choice,confidence,name,probabilities,type', `choice keys ${keys}`);
    const values = question.choices.map((c) => c.value);
    check(answer.probabilities.every((p, i) => p.value === values[i]), 'typed choice values');
    check(typeof answer.choice === 'string' || typeof answer.choice === 'boolean', 'choice type');
    check(answer.choice === values[ps.indexOf(Math.max(...ps))], 'choice is the argmax');
  } else {
    check(keys === 'confidence,name,probabilities,score,type', `score keys ${keys}`);
    check(answer.probabilities.every((p, i) => p.value === i &&
                                      p.label === question.levels[i].label), 'levels');
    const score = ps.reduce((s, p, i) => s + i * p, 0);
    check(Math.abs(answer.score - score) < 1e-6, 'score is the expected level');
  }
}

function checkDecision(decision, questions) {
  check(Object.keys(decision).sort().join(',') === 'answers,model,usage', 'top-level keys');
  check(decision.model === model, `model ${decision.model}`);
  check(decision.answers.length === questions.length, 'one answer per question');
  decision.answers.forEach((answer, i) => checkAnswer(answer, questions[i]));
  const u = decision.usage;
  for (const n of [u.input_tokens, u.output_tokens, u.total_tokens,
                   u.input_tokens_details.cached_tokens, u.input_tokens_details.cache_write_tokens,
                   u.output_tokens_details.reasoning_tokens])
    check(Number.isInteger(n) && n >= 0, 'usage counts');
  check(u.input_tokens > 0 && u.total_tokens === u.input_tokens + u.output_tokens, 'usage totals');
}

async function expectError(promise, errorClass, status) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof errorClass, `${e.constructor.name} is a ${errorClass.name}`);
    check(e.status === status, `status ${e.status}, expected ${status}`);
    check(typeof e.message === 'string' && e.message.length > 0, 'error message');
    return { status: e.status, type: e.type ?? null, param: e.param ?? null };
  }
  throw new Error(`expected a ${errorClass.name}`);
}

const questions = [
  { type: 'predicate', name: 'damaged', instructions: 'Is the item damaged?' },
  { type: 'choice', name: 'department', instructions: 'Which department should answer?',
    choices: [{ value: 'returns', description: 'refunds and replacements' },
              { value: 'billing' }, { value: true }] },
  { type: 'score', instructions: 'How severe is the damage?',
    levels: [{ label: 'cosmetic' }, { label: 'broken', description: 'unusable' },
             { label: 'dangerous' }] },
];

const fromText = await client.decisions.create({
  model, input: 'My package arrived crushed and the lamp inside is broken.', questions,
});
checkDecision(fromText, questions);

const fromMessages = await client.decisions.create({
  model,
  input: [{ role: 'user', content: 'My package arrived crushed.' },
          { role: 'user', content: [{ type: 'input_text', text: 'The lamp inside is broken.' }] }],
  questions: questions.slice(0, 2),
});
checkDecision(fromMessages, questions.slice(0, 2));

const errors = {
  bad_request: await expectError(
      client.decisions.create({ model, input: 'x', questions: [] }), OpenAI.BadRequestError, 400),
  unknown_model: await expectError(
      client.decisions.create({ model: 'gpt-6-luna', input: 'x', questions: questions.slice(0, 1) }),
      OpenAI.NotFoundError, 404),
  wrong_key: await expectError(
      new OpenAI({ baseURL, apiKey: 'not-the-key', maxRetries: 0 }).decisions.create({
        model, input: 'x', questions: questions.slice(0, 1) }),
      OpenAI.AuthenticationError, 401),
};
check(errors.bad_request.type === 'invalid_request_error', 'bad request type');
check(errors.bad_request.param === 'questions', `bad request param ${errors.bad_request.param}`);

console.log(JSON.stringify({ ok: true, answers: fromText.answers, usage: fromText.usage, errors }));
