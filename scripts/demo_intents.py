"""The ``intents`` demo model (scripts/make_demo_models.py): which of 11 intents a request to an
assistant is, taking text. Its ``processing`` tokenizes sentences with the ``tokenizer.json`` next
to the model, a WordPiece vocabulary learnt at set-up from sentences generated from templates;
token embeddings are averaged over the attention mask and fed to a small MLP, trained for a few
seconds. Whole templates and slot values are held out, so the held-out accuracy is honest; 40
held-out sentences go to ``intents/examples.json`` for the README's example and the tests.
"""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from _model_repo import fit_classifier, save_export, small_config, spec, write_config

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SEED = 0

# Requests to an assistant, one template per line: one ending in "?" is a question, one ending in
# "." a statement, the others are commands (which may take "please", "could you", ...). Every
# {slot} is filled from INTENT_SLOTS on its own. Every fourth template and slot value is held
# out: the held-out sentences share neither phrasing nor names with the training ones.
INTENT_TEMPLATES = {
    "weather": """
        what's the weather like in {city}?
        tell me the weather in {city} {day}
        will it rain {day}?
        is it going to rain in {city} {day}?
        give me the forecast for {city}
        is it going to snow {day}?
        how hot will it be in {city} {day}?
        what's the forecast for {city} {day}?
        do i need an umbrella {day}?
        what's the temperature in {city} right now?
        is it sunny in {city}?
        will it be cold {day}?
        check the weather for {date}
        will it be windy in {city} {day}?
        how cold is it outside?
        tell me the temperature {day}
        any chance of rain {day}?
        do i need a jacket {day}?
        show me the weather forecast for {city}
        should i bring an umbrella {day}?
    """,
    "set_alarm": """
        set an alarm for {time}
        wake me up at {time} {day}
        is my alarm set for {time}?
        set my alarm for {time} {day}
        create an alarm at {time}
        what time is my alarm set for?
        wake me at {time}
        i need to wake up at {time} {day}.
        cancel my {time} alarm
        do i have an alarm set {day}?
        change my alarm to {time}
        turn off my {time} alarm
        i have to be up at {time} {day}.
        set an alarm for {date} at {time}
        delete the alarm for {time}
        make an alarm for {time}
        turn off the alarm
        i want to get up at {time}.
        snooze the alarm
        what alarms do i have {day}?
    """,
    "set_timer": """
        set a timer for {duration}
        start a timer for {duration}
        how much time is left on the timer?
        set the timer for {duration}
        time {duration} for the {food}
        count down {duration}
        how long until the {food} is done?
        start a timer for the {food}
        time the {food} for {duration}
        stop the timer
        start a countdown of {duration}
        how much time is left on the {food}?
        is the timer still running?
        put a timer on for {duration}
        add {duration} to the timer
        cancel the timer
        i need a timer for {duration}.
        pause the {food} timer
        cancel the {food} timer
        countdown {duration} for the {food}
    """,
    "play_music": """
        play {artist}
        play some {genre}
        put on some {artist}
        play some {genre} music
        i want to listen to {artist}.
        play the latest album by {artist}
        shuffle my {genre} playlist
        put on my {genre} playlist
        who sings this song?
        play something by {artist}
        i'm in the mood for some {genre}.
        play a song by {artist}
        skip this song
        start my {genre} playlist
        play songs like {artist}
        i want to hear some {artist}.
        let's hear some {genre} music.
        what's this song called?
        play {genre} music by {artist}
        resume the music
    """,
    "translate": """
        translate {phrase} into {language}
        how do you say {phrase} in {language}?
        say {phrase} in {language}
        translate {phrase} to {language}
        what is {phrase} in {language}?
        tell me how to say {phrase} in {language}
        what does {foreign} mean in english?
        how do i say {phrase} in {language}?
        give me the {language} for {phrase}
        what's the {language} word for {phrase}?
        translate {foreign} to english
        what does {foreign} mean?
        how would i say {phrase} in {language}?
        help me say {phrase} in {language}
        translate this into {language}: {phrase}
        what's {phrase} in {language}?
        put {phrase} into {language}
        is {foreign} the right way to say {phrase}?
        what's the english for {foreign}?
        translate {phrase} from english to {language}
    """,
    "calendar": """
        add {event} to my calendar {day}
        what's on my calendar {day}?
        schedule {event} {day} at {time}
        put {event} on my calendar {day}
        am i free {day} at {time}?
        when is {event}?
        move {event} to {date}
        what's on my schedule {day}?
        do i have any meetings {day}?
        cancel {event} {day}
        what's my schedule {day}?
        schedule {event} for {date}
        show me my calendar for {date}
        is {event} still on for {date}?
        create an event called {event} {day}
        do i have anything on my calendar {day}?
        what time is {event}?
        block off {time} {day} for {event}
        reschedule {event} to {date} at {time}
        add an event {day} at {time}
    """,
    "shopping_list": """
        add {item} to my shopping list
        what's on my shopping list?
        put {item} on the shopping list
        add {item} to the list
        we're out of {item}.
        add {item} and {item} to the list
        is {item} on my shopping list?
        put {item} and {item} on my shopping list
        remove {item} from my shopping list
        i need to buy {item}.
        take {item} off the grocery list
        remove {item} from the grocery list
        did i add {item} to the list?
        read me my shopping list
        we need {item} and {item}.
        we're running out of {item}.
        clear my shopping list
        do we need {item}?
        don't let me forget to buy {item}
        what's on the grocery list?
    """,
    "news": """
        read me the news
        what's in the news today?
        give me the latest {topic} news
        give me the news
        what are the headlines?
        tell me the headlines from {source}
        what's happening in {topic}?
        read me the {topic} headlines
        catch me up on {topic} news
        any news about {topic}?
        give me today's top stories
        what's the latest news from {source}?
        what's new in {topic}?
        play the news from {source}
        what's the latest on {topic}?
        tell me the top stories
        show me the {topic} headlines
        anything new from {source}?
        give me a news update
        what's the news on {topic}?
    """,
    "directions": """
        give me directions to {place}
        how do i get to {place}?
        navigate to {place}
        how do i get to {place} {mode}?
        how far is {place}?
        take me to {place}
        where is the nearest {poi}?
        give me directions to the nearest {poi}
        show me the way to {place}
        how long does it take to get to {place} {mode}?
        find a route to {place} {mode}
        how far away is {place}?
        is there traffic on the way to {place}?
        find the fastest way to {place}
        what's the quickest way to {place}?
        show me a route to {place}
        start navigation to {place}
        find a {poi} near me
        which way is {place}?
        navigate to the closest {poi}
    """,
    "smart_home": """
        turn on the {device}
        is the {door} locked?
        turn off the {device} in the {room}
        turn on the {device} in the {room}
        are the lights on in the {room}?
        switch on the {room} {device}
        did i leave the {device} on?
        switch off the {device}
        dim the lights in the {room}
        set the thermostat to {temperature}
        is the {device} still on?
        turn off the {room} {device}
        make it warmer in the {room}
        what's the thermostat set to?
        lock the {door}
        turn the thermostat up to {temperature}
        unlock the {door}
        close the blinds in the {room}
        it's too dark in the {room}.
        is the {device} on in the {room}?
    """,
    "call": """
        call {contact}
        who called me {day}?
        phone {contact}
        call {contact} now
        i need to call {contact}.
        dial {number}
        call {contact} on speaker
        phone {contact} on speaker
        did {contact} call?
        video call {contact}
        get {contact} on the phone
        i want to call {contact}.
        i want to talk to {contact}.
        call {contact} back
        ring {contact}
        give {contact} a call
        call {number}
        make a call to {contact}
        let's call {contact}.
        dial {contact}
    """,
}
INTENT_SLOTS = {
    "city": "london|paris|new york|tokyo|berlin|chicago|sydney|madrid|toronto|seattle|mumbai|cairo"
    "|rome|boston|denver|oslo|dublin|lisbon|seoul|austin",
    "day": "today|tomorrow|tonight|this weekend|on monday|on friday|next week|this afternoon"
    "|tomorrow morning|on saturday|this evening|on the 14th|next tuesday|on sunday|on thursday"
    "|the day after tomorrow",
    "date": "today|tomorrow|monday|friday|next week|this afternoon|saturday|the weekend|sunday"
    "|the 14th|next tuesday|thursday|tonight|this evening|wednesday|the 3rd",
    "time": "7 am|6:30|7:15 pm|noon|half past six|8 o'clock|five thirty|6 in the morning|10 pm"
    "|quarter to seven|9:45|midnight|5:50 am|eleven|4 pm|seven thirty",
    "duration": "5 minutes|ten minutes|an hour|90 seconds|half an hour|20 minutes|3 minutes"
    "|one hour and fifteen minutes|45 seconds|two hours|a minute|12 minutes|forty minutes"
    "|8 minutes|25 minutes|an hour and a half",
    "food": "pasta|eggs|rice|pizza|cake|tea|laundry|cookies|potatoes|roast|noodles|brownies"
    "|soup|bread|oatmeal|steak",
    "artist": "taylor swift|the beatles|miles davis|beyonce|coldplay|bach|daft punk|adele"
    "|kendrick lamar|queen|norah jones|radiohead|ed sheeran|billie eilish|fleetwood mac"
    "|bob marley",
    "genre": "jazz|rock|classical|lo-fi|hip hop|country|reggae|pop|blues|metal|ambient|80s"
    "|indie|salsa|disco|folk",
    "phrase": "good morning|thank you|where is the train station|how much does this cost"
    "|i'm allergic to nuts|the bill please|nice to meet you|i love you|where is the exit"
    "|where is the bathroom|happy birthday|i don't understand|see you later|one coffee please"
    "|what time is it|good night",
    "foreign": "bonjour|gracias|danke schön|arigato|ciao|obrigado|merci beaucoup|por favor"
    "|guten tag|buongiorno|de nada|konnichiwa|hola|au revoir|prost|salud",
    "language": "french|spanish|german|japanese|italian|portuguese|chinese|korean|russian"
    "|arabic|dutch|greek|hindi|turkish|swedish|polish",
    "event": "the dentist appointment|a meeting with sarah|lunch with the team|my yoga class"
    "|the project review|dinner with mom|a call with the client|the parent teacher conference"
    "|my haircut|the team standup|a doctor's appointment|movie night|the board meeting"
    "|coffee with james|soccer practice|the budget review",
    "item": "milk|eggs|bread|bananas|coffee|toilet paper|olive oil|apples|butter|cheese"
    "|chicken|tomatoes|dish soap|orange juice|yogurt|cereal|onions|paper towels|flour|garlic",
    "topic": "sports|politics|technology|business|science|the economy|the election|football"
    "|the stock market|health|climate change|entertainment|space|world affairs|tennis|crypto",
    "source": "the bbc|npr|reuters|the guardian|cnn|the associated press|bloomberg|al jazeera",
    "place": "the airport|the train station|downtown|42 main street|the office"
    "|grandma's house|central park|the nearest hospital|the stadium|the mall|work|home"
    "|the museum|union square|the beach|my hotel",
    "poi": "gas station|pharmacy|coffee shop|parking garage|atm|supermarket|restaurant|ev charger",
    "mode": "by car|by bus|on foot|by bike|by train|by subway|walking|driving",
    "device": "lights|lamp|fan|heater|air conditioning|tv|coffee maker|porch light"
    "|dishwasher|ceiling light|space heater|humidifier",
    "room": "kitchen|living room|bedroom|bathroom|office|garage|hallway|basement"
    "|kids' room|dining room|attic|guest room",
    "door": "front door|back door|garage door|side gate|patio door|basement door|shed|cat flap",
    "temperature": "21 degrees|68 degrees|72|19 degrees celsius|70 degrees|22|65 degrees"
    "|20 degrees",
    "contact": "mom|dad|my sister|my brother|alex|dr. patel|the office|grandma|sarah"
    "|john smith|my boss|the dentist|emma|the plumber|david|my wife|my husband|aunt linda"
    "|the school|mike",
    "number": "555 0142|555-867-5309|020 7946 0958|(212) 555-0199|0800 123 456|555 2368"
    "|+44 20 7946 0321|07700 900123",
}
INTENT_OPENERS = [
    "hey",
    "hey,",
    "ok",
    "okay,",
    "hi,",
    "um",
    "so",
    "excuse me,",
    "hello,",
    "hey there,",
]
INTENT_POLITE = [
    "please",
    "could you",
    "can you",
    "would you",
    "could you please",
    "can you please",
]
INTENT_CLOSERS = [" please", " thanks", ", thank you", ", thanks", " thx", " right away"]
INTENT_LABELS = list(INTENT_TEMPLATES)
INTENT_TRAIN, INTENT_HELD_OUT = 500, 100  # sentences per intent
INTENT_NONCE = 0.2  # share of training slots filled with a made-up word instead
INTENT_VOCAB = 2000
INTENT_MAX_LENGTH = 64
INTENT_EXAMPLES = 40


def every_fourth(values: list[str], held_out: bool) -> list[str]:
    """Every fourth value (held out), or the others (training)."""
    return values[3::4] if held_out else [v for i, v in enumerate(values) if i % 4 != 3]


def intent_sentences(rng: random.Random, held_out: bool, seen: set[str]) -> list[tuple[str, int]]:
    """(sentence, intent) pairs in assorted casing and punctuation, with and without greetings
    and politeness; none in ``seen`` (ignoring case and punctuation), which grows.

    Training sentences have some slots filled with made-up words ("bodika"), so that the model
    learns the phrasing around a name, not only the names it has seen."""
    slots = {k: every_fourth(v.split("|"), held_out) for k, v in INTENT_SLOTS.items()}
    per_intent = INTENT_HELD_OUT if held_out else INTENT_TRAIN

    def fill(slot: str, used: list[str]) -> str:
        if not held_out and rng.random() < INTENT_NONCE:
            syllables = rng.randint(2, 4)
            return "".join(
                rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(syllables)
            )
        used.append(rng.choice([v for v in slots[slot] if v not in used]))
        return used[-1]

    pairs = []
    for intent, block in enumerate(INTENT_TEMPLATES.values()):
        templates = every_fourth([t.strip() for t in block.strip().splitlines()], held_out)
        count = 0
        for _ in range(20 * per_intent):
            template, used = rng.choice(templates), []
            parts = re.split(r"\{(\w+)\}", template.rstrip(".?"))  # odd ones: slot names
            text = "".join(fill(p, used) if i % 2 else p for i, p in enumerate(parts))
            question = template.endswith("?")
            if not template.endswith((".", "?")) and rng.random() < 0.4:
                polite = rng.choice(INTENT_POLITE)
                text, question = f"{polite} {text}", polite != "please"
            if rng.random() < 0.3:
                text = f"{rng.choice(INTENT_OPENERS)} {text}"
            if rng.random() < 0.25:
                text += rng.choice(INTENT_CLOSERS)
            text += rng.choice(["?", "?", "?", ""] if question else ["", "", ".", "!"])
            case = rng.random()
            if case < 0.08:
                text = text.upper()
            elif case < 0.45:
                text = text[0].upper() + text[1:]
            key = " ".join(re.findall(r"\w+", text.lower()))
            if key not in seen:
                seen.add(key)
                pairs.append((text, intent))
                count += 1
                if count == per_intent:
                    break
    return pairs


def train_tokenizer(texts: list[str]) -> Tokenizer:
    """A BERT-style WordPiece tokenizer (lowercasing, [CLS] ... [SEP]) learnt from ``texts``,
    knowing every printable ASCII character besides theirs."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers.trainers import WordPieceTrainer

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]  # [PAD] is id 0
    ascii_chars = string.ascii_lowercase + string.digits + string.punctuation
    chars = sorted(set(ascii_chars).union(*map(tokenizer.normalizer.normalize_str, texts)) - {" "})
    # The trainer numbers the word-continuing pieces (##a) in hash-map order, so equally frequent
    # merges are picked differently from run to run (huggingface/tokenizers#1794). Numbered
    # first, as special tokens, they fix the order; they are ordinary pieces again afterwards.
    continuing = [f"##{c}" for c in chars]
    trainer = WordPieceTrainer(
        vocab_size=INTENT_VOCAB,
        special_tokens=special + continuing,
        initial_alphabet=chars,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    saved = json.loads(tokenizer.to_str())
    saved["added_tokens"] = [t for t in saved["added_tokens"] if t["content"] in special]
    tokenizer = Tokenizer.from_str(json.dumps(saved))
    cls, sep = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tokenizer


def encode_texts(tokenizer_file: Path, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask of ``texts`` the way a server would make them from the
    saved tokenizer.json: padded to the longest, truncated to INTENT_MAX_LENGTH."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(INTENT_MAX_LENGTH)
    encodings = tokenizer.encode_batch(texts)
    ids = torch.tensor([e.ids for e in encodings])
    return ids, torch.tensor([e.attention_mask for e in encodings])


class IntentClassifier(nn.Module):
    """Bag of subwords: token embeddings averaged over the attention mask, then a small MLP."""

    def __init__(self, vocab_size: int, classes: int, dim: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        # Small initial embeddings: pieces the training never updates (parts of words only
        # held-out sentences have) then add little to the average instead of noise.
        nn.init.normal_(self.embed.weight, std=0.02)
        with torch.no_grad():
            self.embed.weight[0].zero_()
        self.head = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


def build_intents(out: Path) -> None:
    rng = random.Random(SEED)
    seen: set[str] = set()
    train, held_out = intent_sentences(rng, False, seen), intent_sentences(rng, True, seen)
    root = out / "intents"
    tokenizer_file = root / "1" / "tokenizer.json"
    tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer([text for text, _ in train])
    tokenizer.save(str(tokenizer_file))
    ids, mask = encode_texts(tokenizer_file, [text for text, _ in train])
    y = torch.tensor([intent for _, intent in train])
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    model = IntentClassifier(tokenizer.get_vocab_size(), len(INTENT_LABELS))
    fit_classifier(model, (ids, mask), y, gen, epochs=10, batch_size=32, label_smoothing=0.1)
    texts = [text for text, _ in held_out]
    y_held_out = torch.tensor([intent for _, intent in held_out])
    with torch.no_grad():
        accuracy = (model(*encode_texts(tokenizer_file, texts)).argmax(-1) == y_held_out).float()
    print(
        f"intents: held-out accuracy {accuracy.mean().item():.3f} on {len(held_out)} sentences "
        f"({len(train)} to train on, vocabulary {tokenizer.get_vocab_size()})"
    )

    inputs = [spec("input_ids", "int64", [-1, -1]), spec("attention_mask", "int64", [-1, -1])]
    labels = INTENT_LABELS
    save_export(model, root / "1" / "model.pt2", inputs)
    write_config(
        root,
        {
            **small_config(
                "intents",
                f"Tells which of {len(labels)} intents a request to an assistant is: "
                f"{', '.join(labels)}. A small bag-of-subwords classifier trained on templated "
                "English requests; it always answers one of these (there is no 'other'). Takes one "
                "sentence or a list of sentences.",
                inputs,
                [spec("logits", "float32", [-1, len(labels)], labels=labels)],
            ),
            "batching": {"max_batch_size": 32, "max_queue_delay_us": 1000},
            "processing": {
                "inputs": {
                    "text": {
                        "type": "text",
                        "description": "what the user asked, in English",
                        "tokenizer": "tokenizer.json",
                        "max_length": INTENT_MAX_LENGTH,
                    }
                },
                "output": {"type": "classification", "top_k": 3},
            },
        },
    )
    # Held-out sentences taken in turn from each intent, for the docs and the tests.
    by_intent = [[text for text, i in held_out if i == intent] for intent in range(len(labels))]
    rounds = [(text, labels[i]) for row in zip(*by_intent) for i, text in enumerate(row)]
    examples = [{"text": text, "intent": intent} for text, intent in rounds[:INTENT_EXAMPLES]]
    (root / "examples.json").write_text(json.dumps({"sentences": examples}, indent=1) + "\n")

    # The saved files as a server uses them: tokenizer.json, then the exported program, which
    # takes any batch and any sequence length.
    program = torch.export.load(str(root / "1" / "model.pt2")).module()
    for rows, length in ((1, 5), (7, 5), (1, 40), (7, 40)):
        ones = torch.ones(rows, length, dtype=torch.int64)
        assert program(ones, ones).shape == (rows, len(labels))
    with torch.no_grad():
        served = program(*encode_texts(tokenizer_file, texts)).argmax(-1) == y_held_out
        answers = program(*encode_texts(tokenizer_file, [e["text"] for e in examples])).argmax(-1)
    right = sum(labels[a] == e["intent"] for a, e in zip(answers.tolist(), examples))
    print(
        f"intents: exported program on tokenizer.json: held-out accuracy "
        f"{served.float().mean().item():.3f}, {right} of {len(examples)} examples right"
    )
