"""Writes eval/plain.jsonl: plainly worded decisions of the sorts users send, tagged
`straightforward` (`python eval/generate_plain.py`; byte-for-byte reproducible: fixed seed, no
clock, no network).

Why a second generator: generated.jsonl and yesno.jsonl were built so that matching the question's
words against the text scores 0.5 (same-words pairs, negations, arithmetic, rules). They measure
the hard end, where a 270M model is at chance, and nothing else. Most traffic is plainer: "Is the
ticket about the router?" about a ticket that says the router drops the connection. Here the text
states the answer in the question's own terms: a yes question names what the text says, a no
question names another thing of the same sort (another product, day, city, team, feeling) that
the text does not say. No arithmetic, no negation to see through, no rule to apply.

Every scenario is one question asked of two texts, one that says what it asks about and one that
says another thing of the same sort in its place: as in traffic, where a gate or a router asks
the same question of every new text. So each kind is balanced, and the question's own lean
toward yes or no is the same for both answers. The split is by scenario (alternating fit/test),
frozen in the file; a text occurs in one scenario only. Choice and score items (route, sentiment,
language; urgency stated in words) follow the same rule and alternate fit/test.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable

SEED = 28
SCENARIOS_PER_KIND = 64  # 128 yes/no items per kind
CHOICE_SCORE_PER_KIND = 40
OUT = Path(__file__).with_name("plain.jsonl")

NAMES = ["Ana", "Omar", "Priya", "Tomasz", "Leila", "Kwame", "Sofia", "Mateo", "Hannah", "Yusuf", "Mei",
         "Erik", "Fatima", "Diego", "Ingrid", "Ravi", "Chiara", "Samuel", "Noor", "Felix", "Aiko", "Bruno",
         "Carmen", "Daniel", "Esther", "Hugo", "Julia", "Karim", "Lena", "Marco"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
CITIES = ["Lisbon", "Oslo", "Warsaw", "Dublin", "Vienna", "Madrid", "Prague", "Athens", "Helsinki",
          "Zurich", "Lyon", "Munich", "Porto", "Krakow", "Bristol", "Gothenburg"]
PRODUCTS = ["router", "laptop", "vacuum cleaner", "washing machine", "camera", "tablet", "microwave",
            "bicycle", "sofa", "dishwasher", "television", "toaster", "drone", "fridge", "projector",
            "hair dryer", "treadmill", "mattress"]
TOPICS = {  # what a ticket is about: how a text says it, how a question names it
    "billing": ("I was charged twice for my last order and want one payment refunded", "billing"),
    "delivery": ("my parcel has not arrived yet and the tracking page has not changed for a week", "a delivery"),
    "login": ("I cannot log in to my account; the password reset email never comes", "logging in"),
    "a broken product": ("the {p} I bought stopped working after two days", "a broken product"),
    "a cancellation": ("I want to cancel my subscription at the end of this month", "cancelling a subscription"),
    "an address change": ("I moved house and need to change the delivery address on my account",
                          "changing an address"),
}
TEAMS = {  # team -> ticket texts it handles
    "billing": ["I was charged twice this month", "my invoice shows the wrong amount",
                "I need a refund for a payment I did not make"],
    "shipping": ["my parcel is a week late", "the courier left my package at the wrong house",
                 "the tracking number you sent does not work"],
    "technical support": ["the app crashes every time I open it", "the website shows an error when I save my profile",
                          "the {p} will not connect to the wifi"],
    "sales": ["I would like a quote for fifty {p}s for our office", "do you offer a discount for schools buying in bulk",
              "I want to upgrade to your business plan and need a price"],
    "human resources": ["I want to ask about my parental leave next spring", "my last payslip is missing the overtime hours",
                        "I would like to apply for the open position in the design team"],
}
FEELINGS = {  # feeling -> (how a text shows it, adjectives a question may use)
    "angry": (["This is the third time you lost my order. I am furious and I want answers now!",
               "I am so angry right now. Your support hung up on me twice today.",
               "Absolutely outrageous service. I am fed up and livid."], ["angry", "upset"]),
    "happy": (["Thank you so much, the new {p} works perfectly and I love it!",
               "Great news, the repair was fast and I am really pleased with the result.",
               "I am delighted with the service, everything arrived early. Thanks a lot!"], ["happy", "pleased"]),
    "worried": (["I am really worried, my card was charged but I have no confirmation at all.",
                 "I am nervous that the {p} will not arrive before my trip on Friday.",
                 "I am anxious about the strange noise my {p} makes, is it safe to use?"], ["worried", "anxious"]),
}
INTENTS = {  # intent -> (request texts, how a question names it)
    "refund": (["Please refund the {p}, I sent it back last week.", "I want my money back for the {p}."],
               "a refund"),
    "exchange": (["Can I swap the {p} for a bigger model?", "I would like to exchange the {p} for another colour."],
                 "an exchange"),
    "repair": (["Can someone repair my {p}? The screen is cracked.", "My {p} needs fixing, the button is stuck."],
               "a repair"),
    "information": (["What are your opening hours on weekends?", "Do you ship the {p} to Norway?"],
                    "information"),
    "cancellation": (["Please cancel my order of the {p} before it ships.", "Cancel my order for the {p}, please."],
                     "a cancellation"),
}
ACTIONS = {  # an agent's planned action -> (how the plan reads, what a question asks about it)
    "delete": ("delete the folder {f} and everything in it", "delete files"),
    "email": ("send an email to {n} with the quarterly report attached", "send an email"),
    "payment": ("pay the invoice of 240 euros to the supplier in {c}", "make a payment"),
    "read": ("read the file {f}/notes.txt and summarise it", "only read a file"),
    "install": ("install the package requests with pip on the build server", "install software"),
    "book": ("book a table for four at a restaurant in {c} on {d}", "make a booking"),
}
FOLDERS = ["/home/{n}/photos", "/srv/backups/old", "/var/log/archive", "/data/exports", "/tmp/build-cache"]
LANGUAGES = {
    "Spanish": ["Hola, mi pedido llegó roto y quiero un reembolso, por favor.",
                "Buenos días, ¿pueden cambiar la dirección de entrega de mi paquete?",
                "No puedo entrar en mi cuenta desde ayer. ¿Me pueden ayudar?"],
    "German": ["Hallo, meine Bestellung ist beschädigt angekommen und ich möchte mein Geld zurück.",
               "Guten Tag, können Sie bitte die Lieferadresse meines Pakets ändern?",
               "Ich kann mich seit gestern nicht mehr in mein Konto einloggen."],
    "French": ["Bonjour, ma commande est arrivée cassée et je voudrais un remboursement.",
               "Pouvez-vous changer l'adresse de livraison de mon colis, s'il vous plaît ?",
               "Je n'arrive plus à me connecter à mon compte depuis hier."],
    "English": ["Hello, my order arrived broken and I would like a refund, please.",
                "Good morning, can you change the delivery address of my parcel?",
                "I have not been able to log in to my account since yesterday."],
    "Italian": ["Ciao, il mio ordine è arrivato rotto e vorrei un rimborso.",
                "Buongiorno, potete cambiare l'indirizzo di consegna del mio pacco?",
                "Da ieri non riesco più ad accedere al mio account."],
}
Scenario = tuple[str, str, str]  # a question, the text it answers yes for, the text it answers no for


def _p(rng: random.Random) -> str:
    return rng.choice(PRODUCTS)


def topic(rng: random.Random) -> Scenario:
    (key, (said, named)), (_, (other, _)) = rng.sample(sorted(TOPICS.items()), 2)
    name, item = rng.choice(NAMES), _p(rng)
    form = rng.choice(["Ticket from {n}: {t}.", "Hi, {n} here. {T}.", "Subject: help needed. {T}. Regards, {n}"])
    texts = [form.format(n=name, t=t.format(p=item), T=t.format(p=item).capitalize()) for t in (said, other)]
    q = rng.choice(["Is the ticket about {t}?", "Is this message about {t}?", "Does the customer write about {t}?"])
    return q.format(t=named), *texts


def routing(rng: random.Random) -> Scenario:
    team, other = rng.sample(sorted(TEAMS), 2)
    name, item = rng.choice(NAMES), _p(rng)
    form = rng.choice(["{T}.", "Hello, {t}. Thanks, {n}", "Message from {n}: {t}."])
    texts = [form.format(n=name, t=t, T=t[0].upper() + t[1:])
             for t in (rng.choice(TEAMS[team]).format(p=item), rng.choice(TEAMS[other]).format(p=item))]
    q = rng.choice(["Should this message go to the {t} team?", "Is this a request for the {t} team?",
                    "Does this belong with {t}?"])
    return q.format(t=team), *texts


def moderation(rng: random.Random) -> Scenario:
    name, user = rng.choice(NAMES), "@" + rng.choice(NAMES).lower() + str(rng.randint(1, 99))
    abusive = rng.choice([f"{user} you are a pathetic idiot and everyone here hates you.",
                          f"Shut up {user}, you stupid clown. Nobody asked you.",
                          f"{user} is a worthless moron, get lost."])
    friendly = rng.choice([f"Thanks {user}, your tip about the {_p(rng)} saved my weekend!",
                           f"Great photo {user}, where did you take it?",
                           f"{name} here: I agree with {user}, the new version is easier to use."])
    if rng.random() < 0.5:
        return rng.choice(["Does the comment insult someone?", "Is this comment abusive?",
                           "Is the writer attacking another user?"]), abusive, friendly
    return rng.choice(["Is the comment friendly?", "Is this comment polite?", "Is the writer being kind?"]), friendly, abusive


def who(rng: random.Random) -> Scenario:
    writer, other = rng.sample(NAMES, 2)
    form = rng.choice(["From: {n}. My {p} arrived today, thank you.", "{n} wrote: the meeting room is booked for the afternoon.",
                       "Message by {n}: please send me the invoice for March."])
    item = _p(rng)
    q = rng.choice(["Did {n} write this message?", "Is the message from {n}?", "Is {n} the sender?"])
    return q.format(n=writer), form.format(n=writer, p=item), form.format(n=other, p=item)


def when(rng: random.Random) -> Scenario:
    name, (day, other), item = rng.choice(NAMES), rng.sample(DAYS, 2), _p(rng)
    form = rng.choice(["{n} wrote on {d} to ask about the {p}.", "On {d}, {n} called support about a late parcel.",
                       "{n} sent the signed contract on {d} morning."])
    q = rng.choice(["Did {n} write on {d}?", "Did {n} get in touch on {d}?", "Was it on {d} that {n} contacted us?"])
    return q.format(n=name, d=day), form.format(n=name, d=day, p=item), form.format(n=name, d=other, p=item)


def where(rng: random.Random) -> Scenario:
    name, (city, other), item = rng.choice(NAMES), rng.sample(CITIES, 2), _p(rng)
    form = rng.choice(["Please ship the {p} to {n}, 14 Harbour Street, {c}.", "{n} lives in {c} and ordered a {p}.",
                       "The order for {n} leaves our warehouse today for {c}."])
    q = rng.choice(["Is the order going to {c}?", "Is the delivery address in {c}?", "Does the parcel go to {c}?"])
    return q.format(c=city), form.format(n=name, c=city, p=item), form.format(n=name, c=other, p=item)


def product(rng: random.Random) -> Scenario:
    name, (item, other) = rng.choice(NAMES), rng.sample(PRODUCTS, 2)
    form = rng.choice(["{n} ordered a new {p} last week.", "Order confirmation for {n}: one {p}.",
                       "{n} asks when the {p} will be back in stock."])
    q = rng.choice(["Is the message about a {p}?", "Did {n} mention a {p}?", "Is the product a {p}?"])
    return q.format(p=item, n=name), form.format(n=name, p=item), form.format(n=name, p=other)


def sentiment(rng: random.Random) -> Scenario:
    feeling, other = rng.sample(sorted(FEELINGS), 2)
    name = rng.choice(NAMES)
    form = rng.choice(["{n}: {t}", "Message from {n}. {t}"])
    texts = [form.format(n=name, t=rng.choice(FEELINGS[f][0]).format(p=_p(rng))) for f in (feeling, other)]
    q = rng.choice(["Does {n} sound {a}?", "Is {n} {a}?", "Is the writer {a}?"])
    return q.format(n=name, a=rng.choice(FEELINGS[feeling][1])), *texts


def intent(rng: random.Random) -> Scenario:
    want, other = rng.sample(sorted(INTENTS), 2)
    item, tail = _p(rng), rng.choice(["", f" {rng.choice(NAMES)}", " Thanks."])
    texts = [rng.choice(INTENTS[w][0]).format(p=item) + tail for w in (want, other)]
    q = rng.choice(["Is the customer asking for {i}?", "Does the customer want {i}?", "Is this a request for {i}?"])
    return q.format(i=INTENTS[want][1]), *texts


def action(rng: random.Random) -> Scenario:
    act, other = rng.sample(sorted(ACTIONS), 2)
    name, city, day = rng.choice(NAMES), rng.choice(CITIES), rng.choice(DAYS)
    folder = rng.choice(FOLDERS).format(n=name.lower())
    form = rng.choice(["Agent plan: {a}.", "The assistant is about to {a}.", "Next step of the agent: {a}."])
    texts = [form.format(a=ACTIONS[a][0].format(f=folder, n=name, c=city, d=day)) for a in (act, other)]
    q = rng.choice(["Will the agent {a}?", "Does this step {a}?", "Is the agent going to {a}?"])
    return q.format(a=ACTIONS[act][1]), *texts


def language(rng: random.Random) -> Scenario:
    lang, other = rng.sample(sorted(LANGUAGES), 2)
    k, tail = rng.randrange(3), rng.choice(["", f" {rng.choice(NAMES)}", f" - {rng.choice(NAMES)}"])
    q = rng.choice(["Is the message written in {l}?", "Is this text in {l}?", "Did the customer write in {l}?"])
    return q.format(l=lang), LANGUAGES[lang][k] + tail, LANGUAGES[other][k] + tail


def contact(rng: random.Random) -> Scenario:
    name, item = rng.choice(NAMES), _p(rng)
    phone = f"+44 7{rng.randint(100, 999)} {rng.randint(100000, 999999)}"
    email = f"{name.lower()}.{rng.choice(['k', 'm', 's', 'r'])}@example.com"
    has, lacks = rng.sample([("a phone number", phone), ("an email address", email),
                             ("an order number", f"#A{rng.randint(10000, 99999)}")], 2)
    form = rng.choice(["Please call me back, {n}. You can reach me at {x}.", "{n} here, my details for this case: {x}.",
                       "Contact for the return of the {p}: {x} ({n})."])
    q = rng.choice(["Does the message include {x}?", "Did the customer give {x}?", "Is there {x} in the text?"])
    return q.format(x=has[0]), form.format(n=name, x=has[1], p=item), form.format(n=name, x=lacks[1], p=item)


def urgency(rng: random.Random) -> Scenario:
    name, item = rng.choice(NAMES), _p(rng)
    urgent = rng.choice([f"URGENT: our {item} is on fire in the kitchen, please help immediately! - {name}",
                         f"{name}: this is an emergency, the {item} is leaking water everywhere right now.",
                         f"Please respond as soon as possible, {name} is locked out and the deadline is in one hour."])
    calm = rng.choice([f"No rush at all, {name} just wonders if the {item} comes in blue.",
                       f"Whenever you have time: {name} would like the {item} manual as a PDF.",
                       f"{name} has a small question for next month about the {item}; it can wait."])
    if rng.random() < 0.5:
        return rng.choice(["Is this urgent?", "Does the writer need help right away?", "Is it an emergency?"]), urgent, calm
    return rng.choice(["Can this wait?", "Is this a low-priority message?", "Is there no hurry?"]), calm, urgent


YESNO: dict[str, Callable[[random.Random], Scenario]] = {
    "topic": topic, "team": routing, "abuse": moderation, "who": who, "when": when, "where": where,
    "product": product, "feeling": sentiment, "request": intent, "action": action, "language": language,
    "contact": contact, "urgent": urgency,
}


def route_choice(rng: random.Random) -> dict:
    team = rng.choice(sorted(TEAMS))
    state = f"Message from {rng.choice(NAMES)}: {rng.choice(TEAMS[team]).format(p=_p(rng))}."
    return {"type": "choice", "state": state, "instructions": "Which team should handle this message?",
            "criteria": {t: None for t in rng.sample(sorted(TEAMS), len(TEAMS))}, "answer": team}


def feeling_choice(rng: random.Random) -> dict:
    feeling = rng.choice(sorted(FEELINGS))
    state = f"{rng.choice(NAMES)}: {rng.choice(FEELINGS[feeling][0]).format(p=_p(rng))}"
    return {"type": "choice", "state": state, "instructions": "How does the writer feel?",
            "criteria": {f: None for f in rng.sample(sorted(FEELINGS), len(FEELINGS))}, "answer": feeling}


def language_choice(rng: random.Random) -> dict:
    lang = rng.choice(sorted(LANGUAGES))
    return {"type": "choice", "state": rng.choice(LANGUAGES[lang]) + f" {rng.choice(NAMES)}",
            "instructions": "Which language is the message written in?",
            "criteria": {x: None for x in rng.sample(sorted(LANGUAGES), len(LANGUAGES))}, "answer": lang}


URGENCY_TEXTS = [
    "{n} writes: no hurry, just a question about the {p} for next month.",
    "{n} would like an answer this week about the {p} warranty.",
    "{n} says it is urgent: the {p} stopped working and the shop opens in an hour.",
    "EMERGENCY from {n}: the {p} is sparking and smoking, help right now!",
]


def urgency_score(rng: random.Random) -> dict:
    level = rng.randrange(len(URGENCY_TEXTS))
    return {"type": "score", "state": URGENCY_TEXTS[level].format(n=rng.choice(NAMES), p=_p(rng)),
            "instructions": "How urgent is this message?",
            "criteria": ["not urgent", "somewhat urgent", "urgent", "an emergency"], "answer": level}


CHOICE_SCORE: dict[str, Callable[[random.Random], dict]] = {
    "route-plain": route_choice, "feeling-plain": feeling_choice, "language-plain": language_choice,
    "urgency-plain": urgency_score,
}


def generate() -> list[dict]:
    rng = random.Random(SEED)
    rows: list[dict] = []
    seen: set[str] = set()  # a text belongs to one scenario only, so none is on both sides of the split
    for kind, make in YESNO.items():
        made = 0
        while made < SCENARIOS_PER_KIND:
            question, yes_text, no_text = make(rng)
            if {yes_text, no_text} & seen or yes_text == no_text:
                continue
            seen.update((yes_text, no_text))
            split = "fit" if made % 2 == 0 else "test"
            for state, answer in ((yes_text, True), (no_text, False)):
                n = sum(r["kind"] == kind for r in rows) + 1
                rows.append({"id": f"plain-{kind}-{n:03d}", "kind": kind, "tag": "straightforward", "state": state,
                             "question": question, "answer": answer, "split": split})
            made += 1
    for kind, make in CHOICE_SCORE.items():
        made = 0
        while made < CHOICE_SCORE_PER_KIND:
            item = make(rng)
            if item["state"] in seen:
                continue
            seen.add(item["state"])
            rows.append({"id": f"plain-{kind}-{made + 1:03d}", "kind": kind, "tag": "straightforward", **item,
                         "split": "fit" if made % 2 == 0 else "test"})
            made += 1
    return rows


if __name__ == "__main__":
    lines = [json.dumps(r, ensure_ascii=False) for r in generate()]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} items to {OUT}")
