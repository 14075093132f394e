"""Spoken-form English text for the training corpora: numbers and abbreviations spelled out.

A library for tools/make_natural_speech.py and tools/pack_speech_data.py (no command line).
Every text it returns is already in the form a speaker says and the 28-label CTC vocabulary
writes (lowercase a-z, space, apostrophe), so the voice is given exactly the words the
transcript holds: "Dr. Lee paid $23.50 on May 3rd, 1998" -> "doctor lee paid twenty three
dollars fifty cents on may third nineteen ninety eight".

  spell_out(raw)            one raw sentence -> spoken form ("" when something is left that has
                            no unambiguous spoken form, e.g. an acronym or a stray symbol)
  number_sentences(rng, n)  n template sentences about times, money, years, dates, phone
                            numbers, ordinals, percentages, measures (spelled out)
  expand_abbreviations(s)   abbreviations left in normalized text -> spoken words
  text_pool(n_numbers)      (train sentences, held-out sentences, dictionary words): the Debian
                            text of tools/make_speech_data.py plus number sentences, split by
                            make_speech_data.is_test_text so a held-out sentence is never trained
"""
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_speech_data import ALLOWED, is_test_text, load_texts, normalize  # noqa: E402

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ORDINAL_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                     "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

# Abbreviations with one reading (matched case-insensitively as whole words, optional ".").
ABBREVIATIONS = {
    "mr": "mister", "mrs": "missus", "dr": "doctor", "prof": "professor", "st": "street",
    "ave": "avenue", "rd": "road", "jr": "junior", "sr": "senior", "vs": "versus",
    "etc": "et cetera", "approx": "approximately", "dept": "department", "govt": "government",
    "km": "kilometers", "kg": "kilograms", "cm": "centimeters", "mm": "millimeters",
    "lbs": "pounds", "ft": "feet", "mph": "miles per hour", "hrs": "hours", "mins": "minutes",
    "e.g": "for example", "i.e": "that is", "a.m": "a m", "p.m": "p m",
}
UNITS = {"%": "percent", "km": "kilometers", "kg": "kilograms", "cm": "centimeters",
         "mm": "millimeters", "mph": "miles per hour", "ft": "feet", "lbs": "pounds"}


def cardinal(n):
  """0 <= n < 10**12 -> words ("one hundred twenty three")."""
  if n < 20:
    return ONES[n]
  if n < 100:
    return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
  if n < 1000:
    return ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + cardinal(n % 100))
  for size, name in ((10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand")):
    if n >= size:
      rest = n % size
      return cardinal(n // size) + " " + name + ("" if rest == 0 else " " + cardinal(rest))
  raise ValueError(n)


def ordinal(n):
  words = cardinal(n).split()
  last = words[-1]
  if last in ORDINAL_IRREGULAR:
    words[-1] = ORDINAL_IRREGULAR[last]
  elif last.endswith("y"):
    words[-1] = last[:-1] + "ieth"
  else:
    words[-1] = last + "th"
  return " ".join(words)


def year(n):
  """Years as read: 1998 "nineteen ninety eight", 1905 "nineteen oh five", 2000 "two thousand",
  2007 "two thousand seven", 2024 "twenty twenty four"."""
  hi, lo = divmod(n, 100)
  if n % 1000 < 10 and n >= 2000 or lo == 0 and hi % 10 == 0:
    return cardinal(n)
  if lo == 0:
    return cardinal(hi) + " hundred"
  return cardinal(hi) + " " + (cardinal(lo) if lo >= 10 else "oh " + ONES[lo])


def digits(s):
  return " ".join("oh" if c == "0" else ONES[int(c)] for c in s)


def _money(m):
  dollars = int(m.group(1).replace(",", ""))
  cents = int((m.group(2) or "0").ljust(2, "0")[:2])
  out = cardinal(dollars) + (" dollar" if dollars == 1 else " dollars")
  if cents:
    out += " " + cardinal(cents) + (" cent" if cents == 1 else " cents")
  return " " + out + " "


def _time(m):
  h, mi = int(m.group(1)), int(m.group(2))
  if mi == 0:
    out = cardinal(h) + " o'clock"
  else:
    out = cardinal(h) + " " + (cardinal(mi) if mi >= 10 else "oh " + ONES[mi])
  return " " + out + " "


def _number(m):
  s = m.group(0).replace(",", "")
  if "." in s and not s.endswith("."):
    whole, frac = s.split(".")
    return " " + cardinal(int(whole)) + " point " + digits(frac) + " "
  s = s.rstrip(".")
  n = int(s)
  if len(m.group(0)) == 4 and 1100 <= n <= 2099:  # "1998" is a year, "1,998" is not
    return " " + year(n) + " "
  if len(s) > 1 and s[0] == "0" or n >= 10 ** 12:
    return " " + digits(s) + " "
  return " " + cardinal(n) + " "


def spell_out(raw):
  """One raw sentence -> spoken form in the CTC alphabet, or "" if it cannot be read out."""
  s = " " + raw.replace("’", "'").replace("`", "'") + " "
  s = re.sub(r"(\d)\s*-\s*(\d)", r"\1 to \2", s)
  s = re.sub(r"\$(\d[\d,]*)(?:\.(\d{1,2}))?", _money, s)
  s = re.sub(r"\b(\d{1,2}):(\d{2})\b", _time, s)
  s = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: " " + ordinal(int(m.group(1))) + " ", s)
  for unit, word in UNITS.items():
    s = re.sub(r"(\d)\s*" + re.escape(unit) + r"(?![a-z])", r"\1 " + word, s)
  s = re.sub(r"\d[\d,]*(?:\.\d+)?", _number, s)
  for abbr, word in ABBREVIATIONS.items():
    s = re.sub(r"(?i)(?<![a-z.])" + re.escape(abbr) + r"\.?(?![a-z])", " " + word + " ", s)
  if re.search(r"\b[A-Z]{2,}\b", s):  # an acronym: letter names or a word? unknown
    return ""
  if re.search(r"[0-9@#$%^&*=<>\[\]{}|~\\+]", s):
    return ""
  s = normalize(s)
  return s if ALLOWED.match(s) else ""


def expand_abbreviations(s):
  """Normalized text -> the abbreviations it still holds spoken ("what's dr" -> "what's
  doctor", "e g" -> "for example"): make_speech_data's sentences keep them as letters."""
  for abbr, word in ABBREVIATIONS.items():
    s = re.sub(r"(?<!\S)" + re.escape(abbr.replace(".", " ")) + r"(?!\S)", word, s)
  return s


def number_sentences(rng, n):
  """n spoken-form sentences built around numbers, dates, times, money and measures."""
  nouns = ["apples", "people", "tickets", "boxes", "pages", "miles", "cars", "votes", "files",
           "students", "houses", "letters", "trees", "books", "chairs", "days", "songs"]
  things = ["the train", "the meeting", "the show", "the bus", "dinner", "the flight", "class",
            "the game", "the doctor's appointment", "the interview", "the concert"]
  names = ["smith", "lee", "brown", "garcia", "miller", "davis", "wilson", "moore", "taylor"]

  def num():
    r = rng.random()
    return str(rng.randint(0, 20) if r < 0.4 else rng.randint(21, 999) if r < 0.8
               else rng.randint(1000, 999999))

  templates = [
      lambda: f"{things[rng.randrange(len(things))]} leaves at {rng.randint(1, 12)}:"
              f"{rng.choice(['00', '15', '30', '45', '05', '20', str(rng.randint(10, 59))])}",
      lambda: f"it costs ${rng.randint(1, 500)}.{rng.randint(0, 99):02d}",
      lambda: f"we sold {num()} {rng.choice(nouns)} last year",
      lambda: f"she was born on {rng.choice(MONTHS)} {rng.randint(1, 31)}"
              f"{rng.choice(['st', 'nd', 'rd', 'th'])} {rng.randint(1900, 2030)}",
      lambda: "call me at " + digits("".join(str(rng.randint(0, 9)) for _ in range(7))),
      lambda: f"about {rng.randint(1, 99)}% of the {rng.choice(nouns)} are gone",
      lambda: f"Dr. {rng.choice(names).title()} lives at {rng.randint(1, 999)} "
              f"{rng.choice(['Elm', 'Oak', 'Main', 'Pine', 'Park'])} St.",
      lambda: f"the {rng.randint(1, 60)}th floor is closed on {rng.choice(DAYS)}",
      lambda: f"in {rng.randint(1100, 2030)} the town had {num()} people",
      lambda: f"the road is {rng.randint(2, 90)} km long and "
              f"{rng.randint(3, 40)}.{rng.randint(1, 9)} meters wide",
      lambda: f"Mr. {rng.choice(names).title()} and Mrs. {rng.choice(names).title()} "
              f"arrived at {rng.randint(1, 12)}:{rng.randint(10, 59)} p.m.",
      lambda: f"chapter {rng.randint(1, 40)} starts on page {num()}",
      lambda: f"the score was {rng.randint(0, 9)} to {rng.randint(0, 9)} after "
              f"{rng.randint(2, 90)} minutes",
      lambda: "my pin is " + digits("".join(str(rng.randint(0, 9)) for _ in range(4))),
  ]
  out = []
  while len(out) < n:
    s = spell_out(templates[rng.randrange(len(templates))]())
    if s:
      out.append(s)
  return out


def text_pool(n_numbers=6000, seed=7):
  """(train sentences, held-out sentences, dictionary words), all spoken form. A sentence is
  held out when its form in make_speech_data is (so its robotic test utterances stay unseen)."""
  sents, words = load_texts()
  sents += number_sentences(random.Random(seed), n_numbers)
  train = sorted({expand_abbreviations(s) for s in sents if not is_test_text(s)})
  test = sorted({expand_abbreviations(s) for s in sents if is_test_text(s)} - set(train))
  return train, test, words
