// SPDX-License-Identifier: Apache-2.0
// Checks tests/data/json_schemas independently of edgellm: every NAME.valid.jsonl line validates
// against NAME.json under ajv (draft 2020-12), and every NAME.invalid.jsonl and NAME.approx.jsonl
// line does not (approx lines are invalid instances that edgellm's grammar deliberately accepts;
// NAME.refused.jsonl lines are valid instances it deliberately refuses, and validate),
// and every NAME.generated.jsonl line (a JSON string: what the bundled model generated under the
// schema, tools/make_json_schema_outputs.py) is a JSON text that validates.
// ajv-formats is not assumed: the five formats json_schema.hpp supports are checked here, with
// a real calendar for dates (so "2023-02-30" is invalid, as RFC 3339 says).
// Run: NODE_PATH=/path/to/node_modules node tools/check_json_schema_fixtures.js [dir]
'use strict';
const fs = require('fs');
const path = require('path');
const Ajv2020 = require('ajv/dist/2020');

const dir = process.argv[2] || path.join(__dirname, '..', 'tests', 'data', 'json_schemas');

function validDate(s) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const y = +m[1], mo = +m[2], d = +m[3];
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  return mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
}
const timeRe = /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d)$/;
const formats = {
  date: validDate,
  time: (s) => timeRe.test(s),
  'date-time': (s) => {
    const i = s.search(/[tT]/);
    return i === 10 && validDate(s.slice(0, i)) && timeRe.test(s.slice(i + 1));
  },
  uuid: (s) => /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(s),
  email: (s) => {
    const atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    const label = '[A-Za-z0-9]+(-+[A-Za-z0-9]+)*';
    return new RegExp(`^${atom}(\\.${atom})*@${label}(\\.${label})+$`).test(s);
  },
};

let failures = 0, schemas = 0, instances = 0, generated = 0;
for (const file of fs.readdirSync(dir).sort()) {
  if (!file.endsWith('.json')) continue;
  const name = file.slice(0, -5);
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  for (const [f, fn] of Object.entries(formats)) ajv.addFormat(f, fn);
  let validate;
  try {
    validate = ajv.compile(JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')));
  } catch (e) {
    console.error(`${file}: schema does not compile: ${e.message}`);
    failures++;
    continue;
  }
  schemas++;
  for (const [suffix, want] of [['valid', true], ['invalid', false], ['approx', false],
                                ['refused', true], ['generated', true]]) {
    const p = path.join(dir, `${name}.${suffix}.jsonl`);
    if (!fs.existsSync(p)) continue;
    const lines = fs.readFileSync(p, 'utf8').split('\n').filter((l) => l.length > 0);
    lines.forEach((line, i) => {
      instances++;
      let got;
      try {
        got = validate(JSON.parse(suffix === 'generated' ? JSON.parse(line) : line));
        if (suffix === 'generated') generated++;
      } catch (e) {
        console.error(`${name}.${suffix}.jsonl:${i + 1}: not JSON: ${e.message}`);
        failures++;
        return;
      }
      if (got !== want) {
        console.error(`${name}.${suffix}.jsonl:${i + 1}: ajv says ${got ? 'valid' : 'invalid'}: ${line}`);
        failures++;
      }
    });
  }
}
console.log(`${schemas} schemas, ${instances} instances (${generated} generated outputs), ` +
            `${failures} disagreements`);
process.exit(failures === 0 ? 0 : 1);
