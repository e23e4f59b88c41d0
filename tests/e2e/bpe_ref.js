// node ref.js PACKAGE_DIR TEXT... : the ids of npm gpt-3-encoder's Encoder.js
// for each text file (read as UTF-8), each after <|endoftext|> (50256), one
// per line. Its own encode() concatenates arrays token by token (quadratic
// on a book), so this runs the same steps -- its expression `pat`, its
// byte_encoder, its bpe() and encoder -- appending in place.
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');
const file = path.resolve(process.argv[2], 'Encoder.js');
const m = new Module(file, module);
m.filename = file;
m.paths = Module._nodeModulePaths(path.dirname(file));
m._compile(fs.readFileSync(file, 'utf8') +
           '\nmodule.exports.internals = {pat, bpe, byte_encoder, encoder, encodeStr};\n', file);
const {pat, bpe, byte_encoder, encoder, encodeStr} = m.exports.internals;
const out = [];
for (const f of process.argv.slice(3)) {
  out.push(50256);
  const text = fs.readFileSync(f, 'utf8');
  for (const match of text.matchAll(pat)) {
    const token = encodeStr(match[0]).map(x => byte_encoder[x]).join('');
    for (const piece of bpe(token).split(' ')) out.push(encoder[piece]);
  }
}
process.stdout.write(out.join('\n') + '\n');
