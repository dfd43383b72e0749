"""A word-level tokenizer over everything ALFWorld can say, for models trained from scratch.

Vocabulary: the grammar's sentences (alfred.twl2), every ALFRED object/receptacle type lowercased, instance
numbers 0-99, the goal templates, this package's prompt/reply template words (`agentprm.agent.format`), and
any `extra_text`; ids are specials first, then "\\n", then the words sorted, so every build gives the same ids.

Pre-tokenizer: words (`\\w+`), single punctuation marks and "\\n" are tokens, other whitespace is dropped, so
"cabinet 1." is ["cabinet", "1", "."]. "\\n" is kept as a token: prompts are one fact per line and a model can
use the line breaks as field boundaries. Decoding joins tokens with spaces and removes the space before
". , : ; ! ? )" and after "(" and around "\\n" and inside "-=", "=-", "->", so env text, our prompts, actions and
"REASON: ...\\nACTION: ..." replies decode exactly; other spacing is normalised (re-encoding gives the same ids).

The chat template writes <s>, then per message a role token (<|system|>, <|user|>, <|assistant|>) and its text;
an assistant message's text and its closing </s> are the `{% generation %}` span, so
`apply_chat_template(..., return_dict=True, return_assistant_tokens_mask=True)` masks exactly the reply tokens and
the end-of-reply token. Plain `tokenizer(text)` adds no special tokens.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentprm.agent.format import TEMPLATE_TEXT
from agentprm.envs.alfworld.setup import import_alfworld

BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"
ROLES = ("system", "user", "assistant")
ROLE_TOKENS = tuple(f"<|{r}|>" for r in ROLES)
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, *ROLE_TOKENS)
NEWLINE = "\n"
MAX_INSTANCE_NUMBER = 99

_WORD_RE = r"\n|\w+|[^\w\s]"
_DECODE_FIXES = ((" .", "."), (" ,", ","), (" :", ":"), (" ;", ";"), (" !", "!"), (" ?", "?"), (" )", ")"),
                 ("( ", "("), (" ' ", "'"), (" / ", "/"), (" \n", "\n"), ("\n ", "\n"), ("- =", "-="), ("= -", "=-"),
                 ("- >", "->"))

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>{% generation %}{{ message['content'] }}{{ eos_token }}{% endgeneration %}"
    "{% elif message['role'] in ['system', 'user'] %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}"
    "{% else %}{{ raise_exception('unknown chat role: ' + message['role']) }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def env_text() -> list[str]:
    """Every fixed string ALFWorld can produce or that our prompts contain (placeholders removed)."""
    import_alfworld()
    import alfworld.gen.constants as constants
    from alfworld.gen.goal_library import gdict
    from alfworld.info import ALFRED_TWL2_PATH

    grammar = Path(ALFRED_TWL2_PATH).read_text()
    sentences = re.findall(r'"rhs":\s*"((?:[^"\\]|\\.)*)"', grammar) + re.findall(r'template :: "([^"]*)"', grammar)
    sentences = [s.encode().decode("unicode_escape") for s in sentences]  # "\n" escapes in the help text
    templates = [t for spec in gdict.values() for t in spec["templates"]]
    names = [*constants.OBJECTS_WSLICED, *constants.RECEPTACLES, *constants.MOVABLE_RECEPTACLES,
             *constants.OBJECTS_SINGULAR]
    text = [*sentences, *templates, "Nothing happens.", "a an some the",  # engine reply; articles
            *(n.lower() for n in names), *map(str, range(MAX_INSTANCE_NUMBER + 1)), *TEMPLATE_TEXT]
    # {o.name}-style slots and #rule# references are not words the env prints.
    return [re.sub(r"\{[^{}]*\}|#[\w.()-]+#|[\[\]{}]", " ", t) for t in text]


def build_tokenizer(extra_text: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """The word-level tokenizer over `env_text()` plus `extra_text` (e.g. the words of templated reasons)."""
    return word_level_tokenizer([*env_text(), *extra_text])


def word_level_tokenizer(texts: Iterable[str], pattern: str = _WORD_RE,
                         decode_fixes: Sequence[tuple[str | Regex, str]] = ()) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose vocabulary is every piece of `texts` that `pattern` matches (the specials and
    "\\n" first, then the pieces sorted); decoding joins pieces with spaces, then applies the module's fixes and
    `decode_fixes` (reason/model.py: digits as pieces, joined back into numbers)."""
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)  # keep the matches
    words = {w for text in texts for w, _ in split.pre_tokenize_str(text)}
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, NEWLINE, *sorted(words - {NEWLINE})])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = split
    core.decoder = decoders.Sequence([decoders.WordPiece(prefix="##", cleanup=False), decoders.Fuse(),
                                      *(decoders.Replace(a, b) for a, b in (*_DECODE_FIXES, *decode_fixes))])
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   unk_token=UNK, additional_special_tokens=list(ROLE_TOKENS),
                                   chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False)
