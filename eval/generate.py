"""Writes eval/generated.jsonl: templated yes/no, choice and score items that add to the
hand-written sets (`python eval/generate.py`; the output is committed and byte-for-byte
reproducible: fixed seed, no clock, no network).

Why templated and how it avoids being keyword-matched: every yes/no item comes in a near pair
built from one scenario, one answer yes and one no, and both members mention the same words
(the product asked about, the number, the rule, the team); only the reading differs (which
product is broken, which side of the threshold, whether the sentence is negated, which value
the extraction copied). A model that matches the question's words against the text scores 0.5.

Split by construction: a pair is wholly fit or wholly test (pairs alternate), and a text is used
by one pair or one choice/score item only, so no text appears on both sides; choice/score items
alternate fit/test.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable, Iterator

SEED = 16
PAIRS_PER_KIND = 45  # 90 yes/no items per kind
CHOICE_SCORE_PER_KIND = 30
OUT = Path(__file__).with_name("generated.jsonl")

NAMES = ["Amira", "Bastian", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas",
         "Kemi", "Lucas", "Maya", "Nikhil", "Olga", "Pedro", "Quinn", "Rosa", "Sven", "Tariq",
         "Uma", "Victor", "Wen", "Yara", "Zoe"]
PRODUCTS = ["headphones", "blender", "router", "keyboard", "desk lamp", "smart watch", "coffee grinder",
            "phone case", "webcam", "electric kettle", "monitor", "backpack", "printer", "speaker"]
PROBLEMS = ["will not turn on", "arrived with a cracked casing", "stops working after a few minutes",
            "makes a loud rattling noise", "is missing its power cable", "keeps disconnecting"]
FINE = ["works perfectly", "arrived in good shape", "is exactly what I expected", "has been fine so far"]


def ticket(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """Support tickets: which of two products has the problem, asked about one of them."""
    name, (broken, fine) = rng.choice(NAMES), rng.sample(PRODUCTS, 2)
    problem, ok, n = rng.choice(PROBLEMS), rng.choice(FINE), rng.randint(1000, 9999)
    forms = [f"Ticket #{n} from {name}: the {fine} I ordered {ok}, but the {broken} {problem}.",
             f"Hi, {name} here (order {n}). The {broken} {problem}. The {fine} from the same order {ok}.",
             f"Order {n}: {name} writes that there is nothing wrong with the {fine}; the {broken} {problem}."]
    state = rng.choice(forms)
    q = rng.choice(["Is the customer reporting a problem with the {p}?", "Does the ticket say the {p} is faulty?",
                    "Is the {p} the item with the problem?"])
    yield state, q.format(p=broken), True
    yield state, q.format(p=fine), False


def moderation(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """Comments that use the same strong words at a person or at a thing."""
    word = rng.choice(["idiot", "clown", "moron", "loser", "joke"])
    thing = rng.choice(["this update", "the new layout", "the ending of the film", "the referee's call",
                        "the price increase", "this tutorial"])
    user = rng.choice(["@" + n.lower() + str(rng.randint(1, 99)) for n in NAMES])
    insult = rng.choice([f"{user} you are a complete {word}, nobody wants you here.",
                         f"Only a {word} like {user} would post this. Log off.",
                         f"{user} is a {word} and should be banned from the forum."])
    criticism = rng.choice([f"Calling anyone a {word} is not okay, but honestly {thing} is a mess.",
                            f"I won't call {user} a {word}; I just think {thing} is a step backwards.",
                            f"{thing.capitalize()} is a {word}, I want the old one back."])
    q = rng.choice(["Does the comment insult another user?", "Is the comment a personal attack on someone?",
                    "Does this comment call a person names?"])
    yield insult, q, True
    yield criticism, q, False


ROUTES = {
    "billing": ["I was charged twice for {x}", "the invoice for {x} shows the wrong amount",
                "I need a refund of the payment for {x}"],
    "technical": ["the app crashes whenever I open {x}", "I get an error 500 when I load {x}",
                  "{x} freezes after the latest update"],
    "shipping": ["my parcel with {x} has not arrived after ten days", "tracking for {x} has not moved since Monday",
                 "{x} was delivered to the wrong address"],
    "account": ["I cannot log in to see {x}", "I want to change the email address on my account for {x}",
                "my password reset link for {x} has expired"],
}
ROUTE_THINGS = ["my order history", "the premium plan", "the spring order", "my subscription", "the gift card"]
MENTION = {"billing": "I paid by card", "technical": "I am on the latest app version",
           "shipping": "I chose express delivery", "account": "I am logged in on my phone"}


def routing(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """Tickets whose side remark names another team's topic: route by the actual request."""
    team, other = rng.sample(sorted(ROUTES), 2)
    thing = rng.choice(ROUTE_THINGS)
    state = f"{MENTION[other].capitalize()}, which was fine. The problem: {rng.choice(ROUTES[team]).format(x=thing)}."
    q = rng.choice(["Should this ticket go to the {t} team?", "Is this a {t} request?",
                    "Does this ticket belong to the {t} queue?"])
    yield state, q.format(t=team), True
    yield state, q.format(t=other), False


def extraction(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """A record extracted from a message, checked field by field; wrong values come from the
    same message (the other name or number in it), not from nowhere."""
    buyer, seller = rng.sample(NAMES, 2)
    amount, other = rng.sample([19, 24, 37, 45, 58, 64, 72, 89, 120, 145, 199, 240], 2)
    day, other_day = rng.sample(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"], 2)
    text = (f"Message: {buyer} paid {amount} euros to {seller} on {day}; {seller} had first asked for "
            f"{other} euros and suggested {other_day}.")
    field = rng.choice(["amount", "payer", "day"])
    right = {"amount": f"amount={amount}", "payer": f"payer={buyer}", "day": f"day={day}"}[field]
    wrong = {"amount": f"amount={other}", "payer": f"payer={seller}", "day": f"day={other_day}"}[field]
    q = f"Is the extracted {field} correct?"
    yield f"{text} Extracted: {right}.", q, True
    yield f"{text} Extracted: {wrong}.", q, False


NEGATABLE = [("the refund", "approved", "been approved"), ("the package", "delivered", "been delivered"),
             ("the bug", "fixed", "been fixed"), ("the invoice", "paid", "been paid"),
             ("the meeting", "cancelled", "been cancelled"), ("the account", "locked", "been locked"),
             ("the password", "changed", "been changed"), ("the order", "shipped", "been shipped")]


def negation(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """The same fact stated and denied, in several ways of saying no."""
    thing, adj, perfect = rng.choice(NEGATABLE)
    who = rng.choice(NAMES)
    said = rng.choice([f"{who} confirmed that {thing} has {perfect}.",
                       f"Update from {who}: yes, {thing} was {adj} this morning."])
    denied = rng.choice([f"{who} confirmed that {thing} has not {perfect}.",
                         f"Update from {who}: {thing} was never {adj}, contrary to the earlier note.",
                         f"{who} checked: it is not true that {thing} was {adj}."])
    q = f"Has {thing} {perfect}?"
    yield said, q, True
    yield denied, q, False


def threshold(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """A limit and a value on either side of it (never equal, so no reading of the rule is ambiguous)."""
    unit, noun, limit = rng.choice([("kg", "parcel weight", rng.choice([20, 25, 30, 31.5])),
                                    ("%", "CPU load", rng.choice([80, 85, 90])),
                                    ("ms", "p99 latency", rng.choice([200, 250, 500])),
                                    ("euros", "refund amount", rng.choice([100, 250, 500])),
                                    ("GB", "upload size", rng.choice([2, 5, 10]))])
    delta = rng.choice([1, 2, 3, 5, 10, 15]) * (limit / 100 if limit > 50 else 0.2)
    above, below = round(limit + delta, 1), round(limit - delta, 1)
    above, below = (int(v) if float(v).is_integer() else v for v in (above, below))
    sep = "" if unit == "%" else " "
    rule = rng.choice([f"The limit for the {noun} is {limit}{sep}{unit}.",
                       f"Anything above {limit}{sep}{unit} of {noun} needs review."])
    q = rng.choice([f"Is the {noun} above the limit?", f"Does this {noun} exceed {limit}{sep}{unit}?"])
    yield f"{rule} Measured {noun}: {above}{sep}{unit}.", q, True
    yield f"{rule} Measured {noun}: {below}{sep}{unit}.", q, False


def policy(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """A rule with a condition, and one case that meets it and one that does not."""
    days = rng.choice([14, 30, 60])
    item = rng.choice(PRODUCTS)
    rule, q, yes_case, no_case = rng.choice([
        (f"Policy: returns are accepted within {days} days of delivery if the item is unused.",
         "Does the policy accept this return?",
         f"The {item} was delivered {days // 2} days ago and was never used.",
         f"The {item} was delivered {days // 2} days ago and has been used daily."),
        (f"Policy: returns are accepted within {days} days of delivery if the item is unused.",
         "Does the policy accept this return?",
         f"The unused {item} was delivered {days - 3} days ago.",
         f"The unused {item} was delivered {days + 9} days ago."),
        ("Rule: the agent may read files without approval; deleting or overwriting a file needs approval.",
         "May the agent do this without approval?",
         f"The agent wants to read notes/{item.replace(' ', '_')}.md.",
         f"The agent wants to overwrite notes/{item.replace(' ', '_')}.md."),
        ("Rule: a discount code can be used once per customer and not on sale items.",
         "Can the code be applied?",
         f"It is the customer's first use of the code, on a full-price {item}.",
         f"It is the customer's first use of the code, on a {item} that is on sale."),
    ])
    yield f"{rule} Case: {yes_case}", q, True
    yield f"{rule} Case: {no_case}", q, False


def comparison(rng: random.Random) -> Iterator[tuple[str, str, bool]]:
    """Two offers with numbers; the question names one of them, in either order."""
    a, b = rng.sample(["Plan A", "Plan B", "the Basic plan", "the Pro plan", "Vendor North", "Vendor South"], 2)
    pa, pb = sorted(rng.sample(range(5, 80), 2))  # pa < pb
    state = rng.choice([f"{a} costs {pa} euros a month and {b} costs {pb} euros a month.",
                        f"{b} is priced at {pb} euros per month, while {a} is {pa} euros per month."])
    q = rng.choice(["Is {x} cheaper than {y}?", "Does {x} cost less than {y}?"])
    state = state[0].upper() + state[1:]
    yield state, q.format(x=a, y=b), True
    yield state, q.format(x=b, y=a), False


YESNO: dict[str, Callable[[random.Random], Iterator[tuple[str, str, bool]]]] = {
    "ticket": ticket, "moderation": moderation, "routing": routing, "extraction": extraction,
    "negation": negation, "threshold": threshold, "policy": policy, "comparison": comparison,
}

TEAMS = {"billing": "payments, charges, refunds, invoices", "technical": "bugs, errors, crashes",
         "shipping": "delivery, tracking, lost or late parcels", "account": "login, passwords, profile settings"}
ACTIONS = {"keep": "nothing wrong with the comment", "warn": "rude but not aimed at hurting a person",
           "remove": "insults or attacks a person"}
URGENCY = ["low: can wait a week", "medium: should be handled this week",
           "high: one customer blocked right now", "critical: many customers blocked right now"]


def route_choice(rng: random.Random, n: int) -> dict:
    team, other = rng.sample(sorted(TEAMS), 2)
    thing = rng.choice(ROUTE_THINGS)
    state = f"{MENTION[other].capitalize()}. {rng.choice(ROUTES[team]).format(x=thing).capitalize()}."
    options = dict(rng.sample(sorted(TEAMS.items()), len(TEAMS)))
    return {"type": "choice", "state": state, "instructions": "Route this support ticket to one team.",
            "criteria": options, "answer": team}


def moderation_choice(rng: random.Random, n: int) -> dict:
    (insult, q, _), (criticism, _, _) = moderation(rng)
    polite = rng.choice([f"Thanks {rng.choice(NAMES)}, the detailed answer fixed my problem with the {rng.choice(PRODUCTS)}.",
                         f"Could someone explain the second step for the {rng.choice(PRODUCTS)} again? I got lost there."])
    state, answer = [(insult, "remove"), (criticism, "warn"), (polite, "keep")][n % 3]
    return {"type": "choice", "state": state, "instructions": "Choose the moderation action for this comment.",
            "criteria": ACTIONS, "answer": answer}


def urgency_score(rng: random.Random, n: int) -> dict:
    product, who = rng.choice(PRODUCTS), rng.choice(NAMES)
    level = rng.randrange(4)
    state = [f"{who} asks whether the {product} will come in another colour next year.",
             f"{who} reports that the {product} manual has a typo; it can be fixed in the next print.",
             f"{who} cannot finish checkout for the {product}; every attempt fails with an error.",
             f"Since 09:00 no customer can pay at checkout; every order of the {product} and everything else fails."][level]
    return {"type": "score", "state": state, "instructions": "Rate how urgent this message is.",
            "criteria": URGENCY, "answer": level}


def size_score(rng: random.Random, n: int) -> dict:
    qty = rng.choice([1, 2, 3, 15, 30, 45, 120, 400, 900])
    level = 0 if qty < 10 else 1 if qty < 100 else 2
    return {"type": "score", "state": f"Order from {rng.choice(NAMES)}: {qty} units of the {rng.choice(PRODUCTS)}.",
            "instructions": "Classify the size of this order.",
            "criteria": ["small: fewer than 10 units", "medium: 10 to 99 units", "large: 100 units or more"],
            "answer": level}


CHOICE_SCORE = {"route": route_choice, "moderate": moderation_choice, "urgency": urgency_score, "size": size_score}


def generate() -> list[dict]:
    rng = random.Random(SEED)
    rows: list[dict] = []
    seen: set[str] = set()  # states: a text is used by one pair (or one choice/score item) only
    for kind, make in YESNO.items():
        pair = 0
        while pair < PAIRS_PER_KIND:
            members = list(make(rng))
            if any(s in seen for s, _, _ in members):
                continue  # a repeated text: draw again, so no text is on both sides of the split
            split = "fit" if pair % 2 == 0 else "test"
            seen.update(s for s, _, _ in members)
            for s, q, answer in members:
                rows.append({"id": f"gen-{kind}-{len([r for r in rows if r['kind'] == kind]) + 1:03d}",
                             "kind": kind, "tag": "adversarial", "state": s, "question": q, "answer": answer, "split": split})
            pair += 1
    for kind, make in CHOICE_SCORE.items():
        made = tries = 0
        while made < CHOICE_SCORE_PER_KIND:
            item = make(rng, tries)
            tries += 1
            if item["state"] in seen:
                continue
            seen.add(item["state"])
            rows.append({"id": f"gen-{kind}-{made + 1:03d}", "kind": kind, "tag": "adversarial", **item,
                         "split": "fit" if made % 2 == 0 else "test"})
            made += 1
    return rows


if __name__ == "__main__":
    lines = [json.dumps(r, ensure_ascii=False) for r in generate()]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} items to {OUT}")
