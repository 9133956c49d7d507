#!/usr/bin/env python3
"""Writes tests/fixtures/hf-tokenizer/: a small Qwen2-style Hugging Face tokenizer folder and what transformers does
with it, for tests/hf-tokenizer.test.ts (which checks src/core/tokenizer/hf.ts against it without Python).

  python3 scripts/make_hf_tokenizer_fixture.py            (needs `tokenizers` and `transformers`)

The tokenizer is a byte-level BPE trained here with the `tokenizers` library on the built-in English text below, laid
out like Qwen2/Qwen2.5's tokenizer.json: NFC normalizer, the Qwen2 split regex then ByteLevel(use_regex=False), a
ByteLevel decoder and post-processor. The BPE has 509 ids (256 bytes + 253 merges); the three special tokens are added
after it, as Qwen's are, so the tokenizer has exactly 512 ids:

  509 <|endoftext|>   510 <|im_start|>   511 <|im_end|>

tokenizer_config.json carries a ChatML chat template (Qwen2-Instruct's), eos_token <|im_end|>, pad_token <|endoftext|>;
generation_config.json's eos_token_id is a list of two ids, as Qwen2.5's is.

expected.json records, from transformers.AutoTokenizer.from_pretrained(folder):
  encode[i]: {text, ids: tok(text, add_special_tokens=False), plain_ids: the same with split_special_tokens=True
              (special-token spellings as plain text), decoded: tok.decode(ids, skip_special_tokens=True),
              plain_decoded: tok.decode(plain_ids, skip_special_tokens=True)}
  chat[i]:   {user, text: apply_chat_template([{role: user, content}], tokenize=False, add_generation_prompt=True),
              ids: tok(text, add_special_tokens=False)}
  templates[i]: {name, template, user, text}: the same render with EXTRA_TEMPLATES' chat_template instead
"""

import json
import os
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, '..', 'tests', 'fixtures', 'hf-tokenizer')

BPE_SIZE = 509
SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']

# Qwen2's pre-tokenizer split pattern (tokenizer.json of Qwen/Qwen2.5-0.5B-Instruct).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2-Instruct's chat template (ChatML, a default system message when the first message is not one).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Templates in the styles of other folders, each rendered by transformers for every CHAT_USERS message (expected.json
# "templates"): Llama 3's header tokens, whitespace control and `| trim`; Qwen3's namespace, reversed loop and
# enable_thinking; plain block tags on their own lines (transformers renders with trim_blocks and lstrip_blocks).
EXTRA_TEMPLATES = {
    'llama3-style': (
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system_message = messages[0]['content'] | trim %}\n"
        "    {%- set messages = messages[1:] %}\n"
        "{%- else %}\n"
        "    {%- set system_message = 'Be brief.' %}\n"
        "{%- endif %}\n"
        "{%- if tools is not none %}{{- raise_exception('this template takes no tools') }}{%- endif %}\n"
        "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}\n"
        "{%- for message in messages %}\n"
        "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim "
        "+ '<|eot_id|>' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
        "{%- endif %}\n"
    ),
    'qwen3-style': (
        "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
        "{%- for message in messages[::-1] %}\n"
        "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
        "    {%- if ns.multi_step_tool and message.role == 'user' and not(message.content.startswith('<tool_response>') "
        "and message.content.endswith('</tool_response>')) %}\n"
        "        {%- set ns.multi_step_tool = false %}\n"
        "        {%- set ns.last_query_index = index %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- for message in messages %}\n"
        "    {%- if message.role == 'user' or message.role == 'system' %}\n"
        "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        "    {%- endif %}\n"
        "    {%- if loop.index0 == ns.last_query_index %}{{- '' }}{%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
        "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
    ),
    'block-lines': (
        "{% for message in messages %}\n"
        "  {% if message.role == 'user' %}\n"
        "User ({{ loop.index }}/{{ messages | length }}): {{ message.content }}\n"
        "  {% endif %}\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}\n"
        "Assistant ({{ eos_token }}):\n"
        "{% endif %}\n"
    ),
}

CORPUS = """\
The little robot woke up before the sun. It checked its battery, stretched its metal arms, and rolled to the window.
Outside, the garden was quiet. A cat slept on the warm stones, and the birds had not started to sing.
"Good morning," said the robot to nobody in particular. It liked the sound of its own voice in the empty house.
Every day it did the same things: it watered the plants, it swept the floor, it counted the apples in the bowl.
Today there were twelve apples. Yesterday there had been thirteen. Someone, it thought, had eaten an apple.
The robot was not angry. It was curious. Who would eat an apple in the middle of the night, and why?
It looked for clues. There was a small seed on the kitchen table, and a long thin scratch on the door.
The cat, perhaps? But cats do not eat apples. The birds, then? Birds do not open doors.
The robot sat down to think. Thinking was the thing it did best, better than sweeping, better than counting.
After a while it had an idea. It would stay awake all night and watch the bowl of apples.
That night the moon was bright. The robot stood in the corner of the kitchen, very still, and waited.
At two o'clock the door opened slowly. A small girl in blue pajamas walked in, took an apple, and smiled.
"You're the one who eats the apples!" said the robot. The girl laughed. "I'm hungry at night," she said.
"Then we'll put the apples next to your bed," said the robot, "and I won't have to count them again."
They became friends. Every morning the robot counted eleven, ten, nine apples, and it was happy about it.
Questions and answers: What is two plus two? It is four. What is the capital of France? It is Paris.
How many days are in a week? There are seven days in a week. How many hours in a day? Twenty-four.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 365 1024 2025 3.14 99.9% $5.00
def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))
A short list of words: apple, banana, cherry, grape, lemon, mango, orange, peach, pear, plum.
Some people write with commas, some with semicolons; others prefer dashes - or even... ellipses!
She said: "It's fine." He asked: "Isn't it late?" They answered: "We've got time, don't worry."
The weather today is sunny with a light breeze. Tomorrow it will rain, and the day after it will snow.
In the library there are many books about history, science, music, art, mathematics and the stars.
The teacher wrote on the board: learning is a journey, not a race. The students copied it into their notebooks.
"""

ENCODE_TEXTS = [
    'Hello world',
    'The quick brown fox jumps over the lazy dog.',
    '  leading spaces and   runs of   spaces  ',
    'line one\nline two\n\nline four\r\n',
    'digits 12345 and 3.14159',
    'café naïve résumé',
    'cafe\u0301 (a decomposed accent, NFC-normalized)',
    'emoji 🙂🚀 and 日本語',
    'tabs\tand\tmore\t\ttabs',
    'nbsp\u00a0ideographic\u3000nel\u0085bom\ufeffend  \u00a0 x',
    "don't you'll I'M we've THEY'RE",
    'Mixed CASE, punctuation!!! ... ???',
    'code: def f(x):\n    return x**2  # square',
    '<|im_start|>user\nHi<|im_end|>\n',
    'text<|endoftext|>more',
    '<|im_end|>',
    'a <|im_start|> b<|im_end|>c',
    '',
]

CHAT_USERS = [
    'Hello!',
    'What is 12345 + 1?\nAnswer briefly.',
    'Emoji 🙂 and a stray <|im_end|> inside',
]


def train() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior='isolated', invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    if tok.get_vocab_size() != BPE_SIZE:
        sys.exit(f'trained BPE has {tok.get_vocab_size()} ids, wanted {BPE_SIZE}: add text to CORPUS')
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    tok = train()
    tok.save(os.path.join(OUT, 'tokenizer.json'))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    with open(os.path.join(OUT, 'tokenizer_config.json'), 'w') as f:
        json.dump(
            {
                'tokenizer_class': 'PreTrainedTokenizerFast',
                'bos_token': None,
                'eos_token': '<|im_end|>',
                'pad_token': '<|endoftext|>',
                'unk_token': None,
                'clean_up_tokenization_spaces': False,
                'split_special_tokens': False,
                'model_max_length': 2048,
                'chat_template': CHAT_TEMPLATE,
            },
            f,
            indent=2,
            ensure_ascii=False,
        )
        f.write('\n')
    with open(os.path.join(OUT, 'generation_config.json'), 'w') as f:
        json.dump(
            {
                'eos_token_id': [ids['<|im_end|>'], ids['<|endoftext|>']],
                'pad_token_id': ids['<|endoftext|>'],
            },
            f,
            indent=2,
        )
        f.write('\n')

    # What transformers makes of the folder (tokenizer.json + tokenizer_config.json only, as a model folder has them).
    with tempfile.TemporaryDirectory() as d:
        for name in ('tokenizer.json', 'tokenizer_config.json'):
            with open(os.path.join(OUT, name)) as src, open(os.path.join(d, name), 'w') as dst:
                dst.write(src.read())
        hf = AutoTokenizer.from_pretrained(d)
    encode = []
    for text in ENCODE_TEXTS:
        with_specials = hf(text, add_special_tokens=False)['input_ids']
        plain = hf(text, add_special_tokens=False, split_special_tokens=True)['input_ids']
        encode.append(
            {
                'text': text,
                'ids': with_specials,
                'plain_ids': plain,
                'decoded': hf.decode(with_specials, skip_special_tokens=True),
                'plain_decoded': hf.decode(plain, skip_special_tokens=True),
            }
        )
    chat = []
    for user in CHAT_USERS:
        messages = [{'role': 'user', 'content': user}]
        text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids_ = hf(text, add_special_tokens=False)['input_ids']
        chat.append({'user': user, 'text': text, 'ids': ids_})
    templates = []
    for name, source in EXTRA_TEMPLATES.items():
        for user in CHAT_USERS:
            messages = [{'role': 'user', 'content': user}]
            text = hf.apply_chat_template(messages, chat_template=source, tokenize=False, add_generation_prompt=True)
            templates.append({'name': name, 'template': source, 'user': user, 'text': text})
    expected = {
        'generator': f'scripts/make_hf_tokenizer_fixture.py (transformers {__import__("transformers").__version__}, '
        f'tokenizers {__import__("tokenizers").__version__})',
        'vocab_size': len(hf),
        'special_ids': ids,
        'eos_id': hf.eos_token_id,
        'pad_id': hf.pad_token_id,
        'encode': encode,
        'chat': chat,
        'templates': templates,
    }
    with open(os.path.join(OUT, 'expected.json'), 'w') as f:
        # One line per case, so a diff after regenerating shows which cases changed.
        head = {k: v for k, v in expected.items() if k not in ('encode', 'chat', 'templates')}
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ',\n')
        keys = ('encode', 'chat', 'templates')
        for key in keys:
            rows = ',\n'.join('  ' + json.dumps(row, ensure_ascii=False) for row in expected[key])
            f.write(f' "{key}": [\n{rows}\n ]' + (',\n' if key != keys[-1] else '\n'))
        f.write('}\n')
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f'vocab size {len(hf)}; special ids {ids}; eos {hf.eos_token_id}, pad {hf.pad_token_id}')
    print(f'wrote {OUT} ({total} bytes)')


if __name__ == '__main__':
    main()
