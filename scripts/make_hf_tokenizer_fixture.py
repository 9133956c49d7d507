#!/usr/bin/env python3
"""Writes two small Hugging Face tokenizer folders and what transformers does with them, for
tests/hf-tokenizer.test.ts (which checks src/core/tokenizer/hf.ts against them without Python):

  python3 scripts/make_hf_tokenizer_fixture.py            (needs `tokenizers` and `transformers`)

Each tokenizer is a byte-level BPE trained here with the `tokenizers` library on the built-in English text below, with
its special tokens added after the BPE so that it has exactly 512 ids.

tests/fixtures/hf-tokenizer/ is laid out like Qwen2/Qwen2.5's tokenizer.json: NFC normalizer, the Qwen2 split regex
then ByteLevel(use_regex=False), a ByteLevel decoder and post-processor; 509 BPE ids (256 bytes + 253 merges), then

  509 <|endoftext|>   510 <|im_start|>   511 <|im_end|>

Its tokenizer_config.json names tokenizer_class Qwen2Tokenizer, as real Qwen2/Qwen3 folders do (transformers 5
rebuilds that class's pipeline itself, the same as the tokenizer.json's), and carries a ChatML chat template
(Qwen2-Instruct's), eos_token <|im_end|>, pad_token <|endoftext|>; generation_config.json's eos_token_id is a list of
two ids, as Qwen2.5's is.

tests/fixtures/hf-tokenizer-llama3/ is laid out like Llama 3's: no normalizer, Llama 3's split regex (digits in runs
of up to 3), BPE with ignore_merges, a TemplateProcessing post-processor that prepends <|begin_of_text|> (only with
add_special_tokens=True); 507 BPE ids, then

  507 <|begin_of_text|>   508 <|end_of_text|>   509 <|start_header_id|>   510 <|end_header_id|>   511 <|eot_id|>

Its tokenizer_config.json has bos_token <|begin_of_text|>, eos_token <|eot_id|>, no pad_token,
clean_up_tokenization_spaces true (as Llama 3's) and a Llama 3 style template that writes {{ bos_token }};
generation_config.json's eos_token_id is [508, 511].

expected.json records, from transformers.AutoTokenizer.from_pretrained(folder):
  encode[i]: {text, ids: tok(text, add_special_tokens=False), plain_ids: the same with split_special_tokens=True
              (special-token spellings as plain text), decoded: tok.decode(ids, skip_special_tokens=True),
              plain_decoded: tok.decode(plain_ids, skip_special_tokens=True)}
  chat[i]:   {user, text: apply_chat_template([{role: user, content}], tokenize=False, add_generation_prompt=True),
              ids: tok(text, add_special_tokens=False)}
  templates[i]: {name, template, user, text, kwargs?}: the same render with EXTRA_TEMPLATES' chat_template instead
              (and kwargs as extra template variables)
  prefixes:  {text, ids, decoded[k]: tok.decode(ids[:k])}: pieces of characters cut off at the end
"""

import json
import os
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, '..', 'tests', 'fixtures')
VOCAB_SIZE = 512

# Qwen2's pre-tokenizer split pattern (tokenizer.json of Qwen/Qwen2.5-0.5B-Instruct).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama 3's (tokenizer.json of meta-llama/Llama-3.2-1B): digits in runs of up to three.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
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
    '',
]


def special_texts(start: str, end: str, other: str) -> list[str]:
    """Strings with a folder's special-token spellings: a turn opener, an end of turn and one more."""
    return [f'{start}user\nHi{end}\n', f'text{other}more', end, f'a {start} b{end}c']


CHAT_USERS = [
    'Hello!',
    'What is 12345 + 1?\nAnswer briefly.',
    'Emoji 🙂 and a stray <|im_end|> inside',
]

LLAMA3_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] | trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = '' %}\n"
    "{%- endif %}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n"
    "{{- 'Cutting Knowledge Date: December 2023\\n\\n' }}\n"
    "{{- system_message }}\n"
    "{{- '<|eot_id|>' }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim "
    "+ '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)


def train(pattern: str, bpe_size: int, specials: list[str], nfc: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior='isolated', invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    if tok.get_vocab_size() != bpe_size:
        sys.exit(f'trained BPE has {tok.get_vocab_size()} ids, wanted {bpe_size}: add text to CORPUS')
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if tok.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f'the tokenizer has {tok.get_vocab_size()} ids, wanted {VOCAB_SIZE}')
    return tok


def write_json(path: str, value: dict) -> None:
    with open(path, 'w') as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write('\n')


def record(out: str, specials: list[str], texts: list[str], templates_to_try: dict[str, str]) -> None:
    """Writes out/expected.json: what transformers makes of the folder's tokenizer.json + tokenizer_config.json."""
    with tempfile.TemporaryDirectory() as d:
        for name in ('tokenizer.json', 'tokenizer_config.json'):
            with open(os.path.join(out, name)) as src, open(os.path.join(d, name), 'w') as dst:
                dst.write(src.read())
        hf = AutoTokenizer.from_pretrained(d)
    ids = {s: hf.convert_tokens_to_ids(s) for s in specials}
    encode = []
    for text in texts:
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
    for name, source in templates_to_try.items():
        for user in CHAT_USERS:
            messages = [{'role': 'user', 'content': user}]
            text = hf.apply_chat_template(messages, chat_template=source, tokenize=False, add_generation_prompt=True)
            templates.append({'name': name, 'template': source, 'user': user, 'text': text})
    for name, source in templates_to_try.items():
        if 'enable_thinking' in source:
            # An extra template variable, as apply_chat_template(..., enable_thinking=False) passes it.
            user = CHAT_USERS[0]
            messages = [{'role': 'user', 'content': user}]
            kwargs = {'enable_thinking': False}
            text = hf.apply_chat_template(
                messages, chat_template=source, tokenize=False, add_generation_prompt=True, **kwargs
            )
            templates.append({'name': name, 'template': source, 'user': user, 'text': text, 'kwargs': kwargs})
    # Decodes of every prefix of one text's ids: pieces of characters cut off at the end, as a capped response is.
    cut_text = 'emoji 🙂🚀 and 日本語'
    cut_ids = hf(cut_text, add_special_tokens=False)['input_ids']
    prefixes = {'text': cut_text, 'ids': cut_ids, 'decoded': [hf.decode(cut_ids[:k]) for k in range(len(cut_ids) + 1)]}
    expected = {
        'generator': f'scripts/make_hf_tokenizer_fixture.py (transformers {__import__("transformers").__version__}, '
        f'tokenizers {__import__("tokenizers").__version__})',
        'vocab_size': len(hf),
        'special_ids': ids,
        'eos_id': hf.eos_token_id,
        'pad_id': hf.pad_token_id,
        'bos_id': hf.bos_token_id,
        'encode': encode,
        'chat': chat,
        'templates': templates,
        'prefixes': prefixes,
    }
    if expected['bos_id'] is None:
        del expected['bos_id']  # the Qwen fixture's expected.json predates the field
    with open(os.path.join(out, 'expected.json'), 'w') as f:
        # One line per case, so a diff after regenerating shows which cases changed.
        keys = ('encode', 'chat', 'templates')
        head = {k: v for k, v in expected.items() if k not in keys and k != 'prefixes'}
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ',\n')
        for key in keys:
            rows = ',\n'.join('  ' + json.dumps(row, ensure_ascii=False) for row in expected[key])
            f.write(f' "{key}": [\n{rows}\n ],\n')
        f.write(' "prefixes": ' + json.dumps(expected['prefixes'], ensure_ascii=False) + '\n}\n')
    total = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f'{os.path.basename(out)}: vocab size {len(hf)}; special ids {ids}; eos {hf.eos_token_id}, '
          f'pad {hf.pad_token_id}, bos {hf.bos_token_id}; {total} bytes')


def make_qwen2() -> None:
    out = os.path.join(FIXTURES, 'hf-tokenizer')
    os.makedirs(out, exist_ok=True)
    specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
    tok = train(QWEN2_PATTERN, VOCAB_SIZE - len(specials), specials, nfc=True)
    tok.save(os.path.join(out, 'tokenizer.json'))
    ids = {s: tok.token_to_id(s) for s in specials}
    write_json(
        os.path.join(out, 'tokenizer_config.json'),
        {
            'tokenizer_class': 'Qwen2Tokenizer',
            'bos_token': None,
            'eos_token': '<|im_end|>',
            'pad_token': '<|endoftext|>',
            'unk_token': None,
            'clean_up_tokenization_spaces': False,
            'split_special_tokens': False,
            'model_max_length': 2048,
            'chat_template': CHAT_TEMPLATE,
        },
    )
    write_json(
        os.path.join(out, 'generation_config.json'),
        {'eos_token_id': [ids['<|im_end|>'], ids['<|endoftext|>']], 'pad_token_id': ids['<|endoftext|>']},
    )
    texts = ENCODE_TEXTS[:-1] + special_texts('<|im_start|>', '<|im_end|>', '<|endoftext|>') + ENCODE_TEXTS[-1:]
    record(out, specials, texts, EXTRA_TEMPLATES)


def make_llama3() -> None:
    out = os.path.join(FIXTURES, 'hf-tokenizer-llama3')
    os.makedirs(out, exist_ok=True)
    bos, eos, start, end, eot = specials = [
        '<|begin_of_text|>',
        '<|end_of_text|>',
        '<|start_header_id|>',
        '<|end_header_id|>',
        '<|eot_id|>',
    ]
    tok = train(LLAMA3_PATTERN, VOCAB_SIZE - len(specials), specials, nfc=False)
    # Llama 3's model and post-processor, set in the JSON (the trainer's BPE has no ignore_merges option).
    data = json.loads(tok.to_str())
    data['model']['ignore_merges'] = True
    bos_id = tok.token_to_id(bos)
    data['post_processor'] = {
        'type': 'Sequence',
        'processors': [
            {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': False, 'use_regex': True},
            {
                'type': 'TemplateProcessing',
                'single': [{'SpecialToken': {'id': bos, 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}],
                'pair': [
                    {'SpecialToken': {'id': bos, 'type_id': 0}},
                    {'Sequence': {'id': 'A', 'type_id': 0}},
                    {'SpecialToken': {'id': bos, 'type_id': 1}},
                    {'Sequence': {'id': 'B', 'type_id': 1}},
                ],
                'special_tokens': {bos: {'id': bos, 'ids': [bos_id], 'tokens': [bos]}},
            },
        ],
    }
    tok = Tokenizer.from_str(json.dumps(data))
    if tok.encode('hi').ids[0] != bos_id or tok.encode('hi', add_special_tokens=False).ids[0] == bos_id:
        sys.exit('the TemplateProcessing post-processor does not prepend <|begin_of_text|> as expected')
    tok.save(os.path.join(out, 'tokenizer.json'))
    ids = {s: tok.token_to_id(s) for s in specials}
    write_json(
        os.path.join(out, 'tokenizer_config.json'),
        {
            'tokenizer_class': 'PreTrainedTokenizerFast',
            'bos_token': bos,
            'eos_token': eot,
            'clean_up_tokenization_spaces': True,
            'model_input_names': ['input_ids', 'attention_mask'],
            'model_max_length': 131072,
            'chat_template': LLAMA3_TEMPLATE,
        },
    )
    write_json(
        os.path.join(out, 'generation_config.json'),
        {'bos_token_id': ids[bos], 'eos_token_id': [ids[eos], ids[eot]], 'do_sample': True},
    )
    texts = ENCODE_TEXTS[:-1] + special_texts(start, eot, eos) + ['digits 1234567 split in threes'] + ENCODE_TEXTS[-1:]
    record(out, specials, texts, {})


LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)


def make_llama2() -> None:
    """A SentencePiece-style BPE (byte fallback, ▁ for spaces) as Llama 2, TinyLlama and Mistral folders have."""
    out = os.path.join(FIXTURES, 'hf-tokenizer-llama2')
    os.makedirs(out, exist_ok=True)
    specials = ['<unk>', '<s>', '</s>']
    byte_tokens = [f'<0x{b:02X}>' for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token='<unk>', byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend('▁'), normalizers.Replace(' ', '▁')])
    tok.decoder = decoders.Sequence(
        [decoders.Replace('▁', ' '), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(' ', 1, 0)]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=specials + byte_tokens, show_progress=False
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    data = json.loads(tok.to_str())
    # The byte tokens <0x00>..<0xFF> are vocabulary entries (ids 3..258), not added tokens, as in Llama 2's file.
    data['added_tokens'] = [a for a in data['added_tokens'] if a['content'] in specials]
    bos_id = data['model']['vocab']['<s>']
    data['post_processor'] = {
        'type': 'TemplateProcessing',
        'single': [{'SpecialToken': {'id': '<s>', 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}],
        'pair': [
            {'SpecialToken': {'id': '<s>', 'type_id': 0}},
            {'Sequence': {'id': 'A', 'type_id': 0}},
            {'SpecialToken': {'id': '<s>', 'type_id': 1}},
            {'Sequence': {'id': 'B', 'type_id': 1}},
        ],
        'special_tokens': {'<s>': {'id': '<s>', 'ids': [bos_id], 'tokens': ['<s>']}},
    }
    tok = Tokenizer.from_str(json.dumps(data))
    if tok.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f'the tokenizer has {tok.get_vocab_size()} ids, wanted {VOCAB_SIZE}')
    tok.save(os.path.join(out, 'tokenizer.json'))
    write_json(
        os.path.join(out, 'tokenizer_config.json'),
        {
            # As Llama 2 / TinyLlama folders: transformers 5 then rebuilds the pipeline (no normalizer, a Metaspace
            # pre-tokenizer that prepends ▁ to the first section only, since legacy is false).
            'tokenizer_class': 'LlamaTokenizerFast',
            'add_bos_token': True,
            'add_eos_token': False,
            'bos_token': '<s>',
            'eos_token': '</s>',
            'unk_token': '<unk>',
            'pad_token': None,
            'legacy': False,
            'clean_up_tokenization_spaces': False,
            'model_max_length': 2048,
            'chat_template': LLAMA2_TEMPLATE,
        },
    )
    write_json(os.path.join(out, 'generation_config.json'), {'bos_token_id': 1, 'eos_token_id': 2})
    texts = ENCODE_TEXTS[:-1] + special_texts('<s>', '</s>', '<unk>') + [' a leading space', '</s> after'] + ENCODE_TEXTS[-1:]
    record(out, specials, texts, {})


def main() -> None:
    make_qwen2()
    make_llama3()
    make_llama2()


if __name__ == '__main__':
    main()
