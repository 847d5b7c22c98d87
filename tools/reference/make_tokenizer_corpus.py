#!/usr/bin/env python3
"""Generates the tokenizer test corpus (tests/fixtures/tokenizer/corpus.json).

Every line is generated here from small hand-written word lists and fixed
seeds (no third-party text), so the corpus is free to use and reproducible:
    python tools/reference/make_tokenizer_corpus.py
Standard library only. Entries may contain newlines (whitespace runs); the
ones without any also go to corpus_lines.txt for the CLI test.
"""
import json
import os
import random
import unicodedata

R = random.Random(20240607)
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "tokenizer")

EN_SUBJ = ["The old sailor", "A quiet librarian", "My neighbour's dog", "The committee", "Every child",
           "The river", "She", "He", "They", "We", "Nobody", "The last train", "A young astronomer",
           "The baker on Elm Street", "Our teacher", "The wind", "A thousand birds", "The government",
           "Grandmother", "The machine", "It", "You", "I", "The city council", "An honest man"]
EN_VERB = ["walked", "sang", "wondered", "remembered", "built", "carried", "painted", "forgot",
           "discovered", "explained", "whispered", "counted", "measured", "opened", "closed",
           "followed", "abandoned", "defended", "wrote", "read", "answered", "questioned", "crossed"]
EN_OBJ = ["the bridge", "a letter to the mayor", "every star in the sky", "the broken clock",
          "an ancient map", "the garden gate", "three loaves of bread", "the long winter",
          "a song about the sea", "the mountain path", "the results of the experiment",
          "their promises", "the empty house", "a small wooden boat", "the morning newspaper"]
EN_ADV = ["slowly", "quietly", "without hesitation", "at dawn", "before the storm",
          "in the afternoon", "with great care", "again and again", "reluctantly", "yesterday",
          "for the first time", "as if nothing had happened", "under the bright moon"]
EN_CONJ = ["and", "but", "because", "although", "while", "so", "yet", "until", "since"]
CONTR = ["it's", "don't", "we're", "they've", "I'm", "you'll", "she'd", "can't", "won't",
         "IT'S", "DON'T", "We'Re", "O'Brien's", "rock 'n' roll", "'tis", "y'all"]


def en_sentence():
    s = f"{R.choice(EN_SUBJ)} {R.choice(EN_VERB)} {R.choice(EN_OBJ)} {R.choice(EN_ADV)}"
    if R.random() < 0.5:
        s += f", {R.choice(EN_CONJ)} {R.choice(EN_SUBJ).lower()} {R.choice(EN_VERB)} {R.choice(EN_OBJ)}"
    if R.random() < 0.3:
        s += f" ({R.choice(CONTR)})"
    if R.random() < 0.2:
        s = f"\"{s},\" {R.choice(['she said', 'he replied', 'they answered', 'I thought'])}"
    return s + R.choice([".", "!", "?", "...", ";", " —", ":"])


def prose():
    return " ".join(en_sentence() for _ in range(R.randint(1, 4)))


IDS = ["value", "count", "buffer", "node", "self", "result", "tmp", "i", "j", "key", "data", "ctx",
       "user_id", "maxLen", "HTTPServer", "parse_json", "__init__", "x0", "_private", "kDefault"]


def code_line():
    ind = R.choice(["", "    ", "        ", "\t", "\t\t", "  "])
    a, b, c = R.choice(IDS), R.choice(IDS), R.choice(IDS)
    n = R.randint(0, 10000)
    forms = [
        f"{ind}int {a} = {b}[{n}] + {c}->{a};",
        f"{ind}for (int {a} = 0; {a} < {n}; {a}++) {{",
        f"{ind}if ({a} != NULL && {b}->{c} >= {n}) return -{R.randint(1, 9)};",
        f"{ind}def {a}(self, {b}: int = {n}) -> list[str]:",
        f"{ind}return [{a} for {a} in range({n}) if {a} % {R.randint(2, 9)} == 0]",
        f"{ind}const {a} = await fetch(`/api/v1/{b}?id=${{{c}}}`);",
        f"{ind}{{\"{a}\": {n}, \"{b}\": [true, false, null], \"{c}\": \"{R.choice(EN_OBJ)}\"}}",
        f"{ind}<div class=\"{a}\"><b>{R.choice(EN_OBJ)}</b> <i>{n}</i></div>",
        f"{ind}<table><tr><td>{a}</td><td>{n}</td></tr></table>",
        f"{ind}SELECT {a}, COUNT(*) FROM {b} WHERE {c} > {n} GROUP BY {a};",
        f"{ind}$ grep -rn \"{a}\" src/ | wc -l  # {n} matches",
        f"{ind}#include <{a}.h>  /* {R.choice(EN_ADV)} */",
        f"{ind}// TODO({b}): fix off-by-one in {a}() when {c}=={n}",
        f"{ind}std::vector<std::pair<int, {a}>> {b}{{{n}}};",
        f"{ind}print(f\"{{{a}!r:>{R.randint(2, 20)}}} -> {{{b}:.3f}}\")",
        f"{ind}{a} ||= {b} && {c} ** {n} >>= 2;",
        f"{ind}fn {a}<'a>(x: &'a str) -> Result<(), Box<dyn Error>> {{ Ok(()) }}",
        f"{ind}\\begin{{equation}} \\int_0^{{{n}}} e^{{-x^2}}\\,dx \\end{{equation}}",
    ]
    return R.choice(forms)


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]


def numbers_line():
    y, mo, d = R.randint(1000, 2099), R.randint(1, 12), R.randint(1, 28)
    forms = [
        f"{y}-{mo:02d}-{d:02d}T{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}Z",
        f"On {MONTHS[mo - 1]} {d}, {y} the total was ${R.randint(0, 10**7):,}.{R.randint(0, 99):02d}",
        f"{R.randint(0, 10**R.randint(1, 18))}",
        f"{R.uniform(-1e6, 1e6):.{R.randint(0, 8)}f}",
        f"{R.uniform(0, 1):.3e} ± {R.uniform(0, 1):.2e}",
        f"Call +{R.randint(1, 99)} ({R.randint(100, 999)}) {R.randint(100, 999)}-{R.randint(1000, 9999)}",
        f"{d}/{mo}/{y % 100:02d} {R.randint(1, 12)}:{R.randint(0, 59):02d} {R.choice(['am', 'pm', 'AM', 'PM'])}",
        f"v{R.randint(0, 9)}.{R.randint(0, 99)}.{R.randint(0, 999)}-rc{R.randint(1, 5)}",
        f"{R.randint(0, 100)}% of {R.randint(1, 10**6)} = {R.uniform(0, 10**6):.2f}",
        f"1st 2nd 3rd {R.randint(4, 99)}th; {R.randint(10, 99)}°C, {R.randint(0, 99)}km/h, {R.randint(1, 9)}½",
        f"0x{R.getrandbits(32):08X} 0b{R.getrandbits(12):012b} 0o{R.randint(0, 4095):o}",
        "".join(R.choice("0123456789") for _ in range(R.randint(20, 60))),
        f"{y}年{mo}月{d}日 {R.randint(1, 23)}時{R.randint(0, 59)}分",
        f"٣{R.randint(0, 99)}٤ ١٢٣ ۱۲۳ ४५६ ⅫⅣ ²³ ①②",
    ]
    return R.choice(forms)


WS_CHARS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\n\n\n", " \n", "\u00a0", "\u3000",
            "\u2003", "\u0085", "\u2028", "\u200b", "\u000b", "\u000c", "\r", " " * 17, "\t \t"]


def whitespace_line():
    parts = []
    for _ in range(R.randint(2, 8)):
        parts.append(R.choice(WS_CHARS) * R.randint(1, 4))
        if R.random() < 0.7:
            parts.append(R.choice(["word", "x", "Hello", "42", "ok.", "(a)", "é", "日本", "—", "if", "’"]))
    s = "".join(parts)
    if R.random() < 0.2:
        s = " " * R.randint(1, 40) + s
    if R.random() < 0.2:
        s = s + " " * R.randint(1, 40)
    return s


EMOJI = ["😀", "😂", "🥲", "❤️", "👍", "👍🏽", "👋🏿", "🙏", "🔥", "✨", "🎉", "🚀", "🌍", "🐍", "🦀", "☕",
         "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏾‍🚀", "🏳️‍🌈", "🏴‍☠️", "❤️‍🔥", "👁️‍🗨️", "🇯🇵", "🇫🇷", "🇺🇸", "1️⃣", "#️⃣",
         "©️", "™", "🫶", "🪐", "🧬", "😶‍🌫️", "🤷‍♀️", "💁🏻‍♂️", "🐈‍⬛", "🏊‍♀️", "🧔🏻‍♀️", "✌🏼"]


def emoji_line():
    out = []
    for _ in range(R.randint(1, 8)):
        out.append(R.choice(EMOJI))
        if R.random() < 0.5:
            out.append(R.choice([" ", "", " and ", "!!", "\n", " 😀 ", ", "]))
        if R.random() < 0.3:
            out.append(R.choice(EN_OBJ))
    return "".join(out)


ZH = ["我们", "今天", "天气", "很好", "学习", "中文", "计算机", "科学", "人工智能", "模型", "北京", "上海",
      "朋友", "喜欢", "吃饭", "喝茶", "图书馆", "问题", "回答", "世界", "和平", "发展", "经济", "历史", "的", "了", "是", "在"]
JA = ["私は", "学生", "です", "東京", "に", "住んで", "います", "こんにちは", "ありがとう", "ございます", "日本語",
      "を", "勉強", "して", "カタカナ", "ひらがな", "コンピューター", "ラーメン", "食べ", "たい", "明日", "雨", "が", "降る"]
KO = ["안녕하세요", "저는", "학생", "입니다", "한국어", "를", "공부", "합니다", "서울", "에", "살아요", "감사합니다",
      "오늘", "날씨", "가", "좋아요", "컴퓨터", "프로그램", "사랑", "해요"]


def cjk_line():
    lang = R.choice([ZH, JA, KO])
    sep = " " if lang is KO else ""
    s = sep.join(R.choice(lang) for _ in range(R.randint(3, 15)))
    punct = "。" if lang is not KO else "."
    if R.random() < 0.4:
        s += R.choice(["，", "、", "！", "？", "「", "」", "（注）", "…"]) + sep.join(R.choice(lang) for _ in range(3))
    return s + punct


AR = ["السلام", "عليكم", "مرحبا", "كيف", "حالك", "الكتاب", "المدرسة", "اللغة", "العربية", "جميلة", "في",
      "من", "إلى", "على", "هذا", "يوم", "الحاسوب", "شكرا", "جزيلا", "مدينة", "القاهرة", "بيروت", "قرأتُ", "كِتَابًا"]
HI = ["नमस्ते", "आप", "कैसे", "हैं", "मैं", "ठीक", "हूँ", "भारत", "हिंदी", "भाषा", "किताब", "पढ़ना", "पसंद",
      "है", "दिल्ली", "मुंबई", "धन्यवाद", "विज्ञान", "कंप्यूटर", "आज", "मौसम", "अच्छा", "क्षत्रिय", "ज्ञान"]


def rtl_indic_line():
    lang = R.choice([AR, HI])
    s = " ".join(R.choice(lang) for _ in range(R.randint(3, 14)))
    if R.random() < 0.3:
        s += " " + R.choice(["(2024)", "123", "OK", "—", "؟", "।", "!"])
    return s


LATIN = ["café", "naïve", "façade", "résumé", "Müller", "Straße", "Größe", "über", "niño", "mañana",
         "¿Qué", "tal?", "¡Hola!", "jalapeño", "Łódź", "źdźbło", "żółć", "Kraków", "Tiếng", "Việt", "Hà", "Nội",
         "phở", "Ðức", "Dvořák", "šťastný", "İstanbul", "ağaç", "Ærøskøbing", "smørrebrød", "Ångström",
         "coração", "São", "Paulo", "œuvre", "Ælfred", "fjörður", "Þórr", "Ιθάκη", "Москва", "Київ", "ქართული"]


def latin_line():
    s = " ".join(R.choice(LATIN) for _ in range(R.randint(2, 12)))
    if R.random() < 0.35:  # decomposed forms (NFD) too
        s = unicodedata.normalize("NFD", s)
    elif R.random() < 0.1:
        s = s + " e\u0301 a\u0308 n\u0303 o\u0302\u0323 \u1e9b\u0323"
    return s


SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]",
            "<unused0>", "<unused42>", "<start_of_image>", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
            "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
            "<think>", "</think>", "<tool_call>", "<|fim_prefix|>", "<|reserved_special_token_7|>", "<repo_name>",
            "<file_sep>", "<|vision_start|>", "<s>", "</s>", "<b>", "</b>", "<table>", "<0x41>", "<0xFF>"]
PARTIAL = ["<start_of_tur", "<|im_start", "|im_end|>", "<<bos>>", "<bos", "end_of_turn>", "<|", "|>", "<>", "< bos >"]


def special_line():
    out = []
    for _ in range(R.randint(1, 6)):
        out.append(R.choice(SPECIALS if R.random() < 0.75 else PARTIAL))
        if R.random() < 0.7:
            out.append(R.choice(["user\n", "model\n", "Hello", " ", "\n", "assistant", " text ", "", "x"]))
    return "".join(out)


BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
          (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x2190, 0x23FF),
          (0x2500, 0x27BF), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
          (0x1F300, 0x1FAFF), (0x300, 0x36F), (0xE000, 0xE0FF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF),
          (0x20000, 0x2A6DF), (0x1, 0x1F)]


def fuzz_line():
    s = []
    for _ in range(R.randint(1, 30)):
        lo, hi = R.choice(BLOCKS)
        cp = R.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF or cp == 0:
            cp = 0x41
        s.append(chr(cp))
    return "".join(s)


MISC = ["https://example.com/path/to/page?query=1&lang=en#section-2",
        "mailto:someone@example.org", "C:\\Users\\Public\\Documents\\report (final) v2.docx",
        "/usr/local/lib/python3.11/site-packages/__pycache__/x.cpython-311.pyc",
        "**bold** _italic_ `code` ~~strike~~ > quote", "- [ ] task one\n- [x] task two",
        "| a | b |\n|---|---|\n| 1 | 2 |", "$$E = mc^2$$", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "!!!!!!!!!!!!??????......,,,,,;;;;", "----------------------------------------",
        "================", "Supercalifragilisticexpialidocious antidisestablishmentarianism",
        "pneumonoultramicroscopicsilicovolcanoconiosis", "ſ 'ſ 'S 'ſt ﬁ ﬂ Ǆ ǅ ǆ K Å",
        "I'LL WE'VE THEY'RE HE'D", "don't won't shan't ain't", "'s 't 're 've 'm 'll 'd",
        "\u2581leading lower one eighth block \u2581\u2581x", "tab\there", "nul-free \u0001\u0002\u001f controls",
        "\ufeffBOM at start", "zero\u200bwidth\u200cjoiner\u200dtest", "\U0001E4D0\U0001E4EB Nag Mundari (Unicode 15)",
        "x" * 300, "ab " * 120, "😀" * 40, "\n" * 40, " " * 80, "\t" * 35, "日本語" * 50]


def build():
    gens = [(prose, 520), (code_line, 300), (numbers_line, 250), (whitespace_line, 200), (emoji_line, 150),
            (cjk_line, 200), (rtl_indic_line, 200), (latin_line, 200), (special_line, 160), (fuzz_line, 200)]
    lines = []
    for g, n in gens:
        lines.extend(g() for _ in range(n))
    lines.extend(MISC)
    # multi-line paragraphs mixing the above
    for _ in range(60):
        lines.append("\n".join(R.choice([prose, code_line, cjk_line, emoji_line, latin_line])()
                               for _ in range(R.randint(2, 5))))
    lines = [ln for ln in lines if ln]
    return lines


def main():
    lines = build()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump({"description": "generated by tools/reference/make_tokenizer_corpus.py", "lines": lines}, f,
                  ensure_ascii=False, indent=0)
        f.write("\n")
    flat = [ln for ln in lines if "\n" not in ln and "\r" not in ln and "\u2028" not in ln and "\u2029" not in ln
            and "\u0085" not in ln and "\x0b" not in ln and "\x0c" not in ln]
    with open(os.path.join(OUT, "corpus_lines.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(ln + "\n" for ln in flat[:400]))
    print(f"{len(lines)} entries ({len(flat)} single-line), {sum(len(x.encode()) for x in lines)} bytes")


if __name__ == "__main__":
    main()
