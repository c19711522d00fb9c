"""Word lists the default judge's rules read, in several languages (data, no logic).

Each list covers English, Spanish, French, German, Italian, Portuguese, Dutch, Polish,
Swedish, Turkish, Russian, Japanese and Chinese at least in their common forms. They are
written from general knowledge of each language, not from the labelled splits: a rule
that reads them should work on a language or a topic no split contains.

Decisions and why: phrases, not single words, wherever a single word is ambiguous
("klopt niet", not "niet"; "not what I asked", not "not"); aliases map names to one
canonical token so that a call's `target="JPY"` is grounded by a request that says "yen".
"""

from __future__ import annotations

from openclaw_rl.judge import world_lexicons as world

__all__ = ["ALIASES", "APPROVAL", "BUT", "CHANGE", "COUNT_WORDS", "DEFERRAL", "DEFECT", "DOUBT_VERBS", "LEADING_NO",
           "MISSING", "MONTHS", "FOLLOW_UP_OPENERS", "NEGATED_COPULA", "NEGATION", "NEGATIVE_EVALUATION", "NOT_ASKED",
           "SARCASM", "TAG_QUESTIONS", "THANKS", "THAT_IS", "TOO", "TOPIC_CHANGE", "UNITS", "WANTS", "WEEKDAYS",
           "WRONG"]


def _alternation(words: str) -> str:
    """A regex alternation of `|`-separated phrases, longest first (so "not right" beats "not")."""
    return "|".join(sorted((w.strip() for w in words.split("|") if w.strip()), key=len, reverse=True))


# -- what people write ------------------------------------------------------------------

# Saying the answer is wrong, without saying what is right.
WRONG = _alternation(
    "wrong|incorrect|not right|not correct|not true|not even close|nowhere near|way off|off by a mile|that's false"
    "|incorrecto|equivocado|no es correcto|no es así|está mal|faux|c'est faux|pas correct|pas ça|c'est pas ça"
    "|falsch|stimmt nicht|nicht richtig|stimmt so nicht|sbagliato|non è giusto|non è corretto|errato|non è così"
    "|errado|não está certo|não é isso|incorreto|fout|klopt niet|niet juist|niet correct|klopt geen hout"
    "|źle|błędnie|nieprawda|to nie tak|niepoprawnie|fel|stämmer inte|inte rätt|felaktigt|yanlış|doğru değil"
    "|hatalı|неправильно|неверно|не так|ошибка|違う|違います|間違|ちがう|不对|错了|不正确|不是这样"
    "|backwards|the other way round|the other way around|mixed up|al revés|à l'envers|verkehrt herum|andersrum"
    "|al contrario|ao contrário|omgekeerd|na odwrót|tvärtom|tersine|наоборот|反了")

# Saying something is missing.
MISSING = _alternation(
    "missing|is missing|left out|leaves out|you forgot|you missed|doesn't show|doesnt show|doesn't include"
    "|doesnt include|doesn't mention|doesnt mention|falta|faltan|il manque|manque|fehlt|fehlen|manca|mancano"
    "|ontbreekt|brakuje|saknas|eksik|не хватает|抜けて|缺少|漏了")

# Saying it does not work.
DEFECT = _alternation(
    "crashes|crashed|doesn't work|does not work|didn't work|not working|broken|breaks on|throws|infinite loop"
    "|doesn't compile|won't compile|no funciona|ne marche pas|ne fonctionne pas|funktioniert nicht|geht nicht"
    "|non funziona|não funciona|werkt niet|nie działa|fungerar inte|funkar inte|çalışmıyor|не работает"
    "|動かない|不能用|不行")

# Saying it is not what was asked.
NOT_ASKED = _alternation(
    "not what i asked|not what i wanted|not what i meant|not what i needed|not what i said|didn't ask for"
    "|did not ask for|never asked for|no es lo que pedí|no es lo que quería|no pedí eso"
    "|ce n'est pas ce que j'ai demandé|pas ce que j'ai demandé|pas ce que je voulais|nicht was ich wollte"
    "|nicht, was ich wollte|nicht was ich gefragt|nicht, was ich gefragt|non è quello che ho chiesto"
    "|non ho chiesto|não foi isso que eu pedi|não é o que eu pedi|niet wat ik vroeg|niet wat ik bedoelde"
    "|nie o to prosiłem|nie o to prosiłam|nie o to pytałem|inte det jag bad om|inte vad jag frågade"
    "|istediğim bu değil|не то, что я просил|не то что я просил|не об этом|頼んでない|我没要")

# Judging it bad or dull, in one or two words.
NEGATIVE_EVALUATION = _alternation(
    "meh|boring|bland|generic|dull|lame|cringe|cringey|terrible|awful|horrible|useless|pointless|rubbish|garbage"
    "|nonsense|clunky|cheesy|corny|so bad|pretty bad|really bad|vague|repetitive|wordy|verbose"
    "|confusing|unclear|off-topic|off topic"
    "|aburrido|horrible|malísimo|pésimo|inútil|ennuyeux|nul|horrible|banal|langweilig|schrecklich|furchtbar"
    "|nutzlos|noioso|banale|pessimo|orribile|inutile|chato|péssimo|horrível|inútil|saai|slecht|waardeloos"
    "|vreselijk|nudne|okropne|beznadziejne|tråkigt|hemskt|värdelöst|sıkıcı|berbat|rezalet|скучно|ужасно"
    "|отстой|つまらない|ひどい|无聊|糟糕|太差")

# Praise that means its opposite ("wow, groundbreaking."), or the marks of irony.
SARCASM = _alternation(
    "groundbreaking|revolutionary|how original|so original|real original|very original|captain obvious"
    "|nobody has ever thought|no one has ever thought|who would have thought|who knew|never would have guessed"
    "|thanks for nothing|what a surprise|shocking|mind blown|/s|🙄|nice try|oh great, another|great, another"
    "|qué original|quelle originalité"
    "|wie originell|che originalità|que original|wat origineel")

# "Too long", "way too technical": asks for less of something.
TOO = r"(?:(?:^|[.!?;,]\s*|\b(?:that's|that is|it's|it is|this is|way|far|much|a bit|bit|just|still|kinda)\s+)too" \
      r"\s+(?!much\b[.!?]?$)[a-z]+\b)|\bdemasiado\b|\btrop\s+\w+|\bzu (?:lang|kurz|viel|kompliziert|technisch" \
      r"|formell|förmlich|locker|schwer|einfach|teuer|allgemein)\b|\btroppo\b|\bza (?:długie|długi|krótkie" \
      r"|trudne)\b|\bför (?:lång|långt|kort|svårt)\b|\bслишком\b"

# Approval without thanks: the answer worked, fits, is good.
APPROVAL = _alternation(
    "worked like a charm|works like a charm|like a charm|worked|works|works now|that did it|did the trick"
    "|nailed it|spot on|perfect|great|excellent|brilliant|awesome|nice|nicer|lovely|solid|crystal clear|clearer"
    "|helpful|good|looks good|sounds good|very good"
    "|clicked|makes sense|lands well|well explained|good explanation|exactly what|just what|that's the one"
    "|love it|love this|much better|way better|so much better|using it|will use|i'll use|that helps|helped"
    "|genial|perfecto|funciona|funcionó|génial|parfait|ça marche|super|perfekt|klappt|funktioniert|prima"
    "|perfetto|funziona|ottimo|perfeito|funcionou|ótimo|werkt|precies|idealnie|działa|świetnie|perfekt"
    "|fungerar|funkar|mükemmel|çalıştı|harika|отлично|работает|супер|完璧|できた|完美|好的|可以了")

# Thanks (the classifier reads its own list; the rules read this one).
THANKS = _alternation(
    "thanks|thank you|thank u|thx|ty|tysm|cheers|appreciate it|appreciated|merci|danke|vielen dank|gracias"
    "|grazie|obrigado|obrigada|dank je|dank u|bedankt|dzięki|dziękuję|tack|teşekkürler|teşekkür ederim|sağ ol"
    "|спасибо|ありがとう|谢谢|感谢")

# Negation and contrast: an approval word next to these is no approval ("works, but slowly").
NEGATION = _alternation(
    "not|no|never|nothing|nope|nicht|kein|keine|pas|non|niet|geen|nie|inte|inget|değil|не|нет|nunca|nada|mai")
BUT = _alternation(
    "but|though|although|however|except|aber|pero|sin embargo|mais|però|porém|mas|maar|ale|men|ama|fakat|но"
    "|однако|でも|但是|不过")

# Asking for it differently: a question with these is a correction, not a follow-up.
CHANGE = _alternation(
    "instead|again|shorter|longer|simpler|simplify|without|redo|rewrite|fix|change|less|fewer|more formal"
    "|more casual|don't|do not|stop|just the|correct it|otra vez|de nuevo|en lugar|plus court|encore|nochmal"
    "|noch mal|stattdessen|kürzer|ancora|di nuovo|invece|outra vez|em vez|opnieuw|korter|in plaats"
    "|jeszcze raz|zamiast|igen|istället|tekrar|yerine|ещё раз|снова|вместо|in english|in spanish|in french"
    "|in german|in italian|in portuguese|in dutch|in polish|in swedish|in turkish|in russian|in japanese"
    "|in chinese|in korean|you forgot|you missed|you skipped|you ignored|did you even|where is the|where's the"
    "|what happened to")

# Thinking aloud, deferring, stepping away: says nothing about the answer.
DEFERRAL = _alternation(
    "let me think|let me see|let me check|let me dig|let me look|i'll look|i'll check|i'll ask|i'll see"
    "|i'll think|i'll get back|i'll send|i'll try it later|need to think|have to think|have to ask|need to ask"
    "|one sec|brb|be right back|hang on|give me a minute|later|déjame pensar|déjame ver|lo pienso|luego te digo"
    "|tengo que pensar|voy a ver|je vais voir|je vais réfléchir|laisse-moi réfléchir|je te dis|je reviens"
    "|lass mich überlegen|lass mich kurz|ich schau mal|mal sehen|ich melde mich|ich überlege|fammi pensare"
    "|vediamo|ci penso|ti faccio sapere|ci devo pensare|deixa-me pensar|deixa eu pensar|vou ver|vou pensar"
    "|vou falar com|depois digo|depois te digo|even kijken|eens kijken|ik kijk even|laat me even|ik denk er"
    "|ik laat het weten|muszę pomyśleć|zobaczę|dam znać|niech pomyślę|låt mig tänka|jag återkommer|ska kolla"
    "|düşüneyim|bakayım|haber veririm|дай подумать|посмотрю|подумаю|考えてみる|ちょっと待って|我想想|让我想想"
    "|等一下")

# Openers of a question or request that builds on the answer.
FOLLOW_UP_OPENERS = _alternation(
    "what|what's|which|who|whom|whose|when|where|how|can|could|would|will|is there|are there|any|anything"
    "|do|does|did|should|tell me|show me|give me|now|next|and|also|what about|how about|roughly|approximately"
    "|y|qué|cómo|cuándo|dónde|cuál|cuánto|cuántos|quién|et|quoi|comment|quand|où|quel|quelle|combien|und"
    "|was|wie|wann|wo|welche|welcher|gibt es|e|cosa|come|quando|dove|quale|quanto|quanti|o que|como|onde"
    "|qual|quantos|en|wat|hoe|wanneer|waar|welke|hoeveel|co|jak|kiedy|gdzie|który|ile|och|vad|hur|när"
    "|vilken|nasıl|nerede|hangi|kaç|что|как|когда|где|какой|сколько|а что|а как|и как")

# "How many", "count": a request for a count.
COUNT_WORDS = _alternation(
    "how many|how much|count|number of|total|tally|cuántos|cuántas|combien|wie viele|quanti|quante|quantos"
    "|quantas|hoeveel|ile|hur många|kaç|сколько|いくつ|多少")

# Doubting: "I thought", "are you sure".
DOUBT_VERBS = _alternation(
    "i thought|thought|i was sure|are you sure|you sure|pensaba|creía|je pensais|je croyais|ich dachte"
    "|pensavo|credevo|achei|eu achava|pensei|ik dacht|myślałem|myślałam|jag trodde|sanıyordum|я думал"
    "|я думала|以为|思った")

# "Isn't it", "wasn't it", in other languages: a negated question about what the answer is.
NEGATED_COPULA = _alternation(
    "no es|no era|no fue|no son|no eran|ce n'est pas|c'est pas|ce n'était pas|c'était pas|n'est-ce pas"
    "|ist es nicht|war es nicht|sind es nicht|waren es nicht|ist das nicht|war das nicht|nicht eher"
    "|non è|non era|non erano|non sono|não é|não era|não foi|não são|is het niet|was het niet|zijn het niet"
    "|waren het niet|is dat niet|czy to nie|czy nie|nie było|är det inte|var det inte|är inte|var inte"
    "|değil mi|değil miydi|разве не|а не|это не|разве|じゃない|ではない|じゃなかった|不是|难道不是")

# A value followed by a tag that asks for confirmation: "1912 no?", "Rabat, non?".
TAG_QUESTIONS = _alternation(
    "no|right|non|nicht|oder|ne|né|não|vero|toch|nee|nie|nej|inte|değil mi|нет")

# The same lists in about forty more languages (`judge.world_lexicons`), and three of its own.
WRONG = _alternation(f"{WRONG}|{world.WRONG}")
DEFECT = _alternation(f"{DEFECT}|{world.DEFECT}")
CHANGE = _alternation(f"{CHANGE}|{world.CHANGE}")
NEGATIVE_EVALUATION = _alternation(f"{NEGATIVE_EVALUATION}|{world.NEGATIVE_EVALUATION}")
SARCASM = _alternation(f"{SARCASM}|{world.SARCASM}")
APPROVAL = _alternation(f"{APPROVAL}|{world.APPROVAL}")
THANKS = _alternation(f"{THANKS}|{world.THANKS}")
NEGATION = _alternation(f"{NEGATION}|{world.NEGATION}")
BUT = _alternation(f"{BUT}|{world.BUT}")
DEFERRAL = _alternation(f"{DEFERRAL}|{world.DEFERRAL}")
FOLLOW_UP_OPENERS = _alternation(f"{FOLLOW_UP_OPENERS}|{world.FOLLOW_UP_OPENERS}")
DOUBT_VERBS = _alternation(f"{DOUBT_VERBS}|{world.DOUBT_VERBS}")
NEGATED_COPULA = _alternation(f"{NEGATED_COPULA}|{world.NEGATED_COPULA}")
TAG_QUESTIONS = _alternation(f"{TAG_QUESTIONS}|{world.TAG_QUESTIONS}")
TOPIC_CHANGE = _alternation(world.TOPIC_CHANGE)  # a new question announced as one: progression
WANTS = _alternation(world.WANTS)  # "I want it ...", "please ...": after a correction, says how it should be
LEADING_NO = _alternation(world.LEADING_NO)  # a reply that opens with "no" in any language
THAT_IS = _alternation(world.THAT_IS)  # "that's Italian": says what the answer is

# -- what tools name ------------------------------------------------------------------------

WEEKDAYS: dict[str, int] = {}
for _day, _names in enumerate((
        "monday lunes lundi montag lunedì lunedi segunda maandag poniedziałek poniedzialek måndag pazartesi "
        "понедельник",
        "tuesday martes mardi dienstag martedì martedi terça terca dinsdag wtorek tisdag salı sali вторник",
        "wednesday miércoles miercoles mercredi mittwoch mercoledì mercoledi quarta woensdag środa sroda onsdag "
        "çarşamba carsamba среда",
        "thursday jueves jeudi donnerstag giovedì giovedi quinta donderdag czwartek torsdag perşembe persembe "
        "четверг",
        "friday viernes vendredi freitag venerdì venerdi sexta vrijdag piątek piatek fredag cuma пятница",
        "saturday sábado sabado samedi samstag sonnabend sabato zaterdag sobota lördag lordag cumartesi суббота",
        "sunday domingo dimanche sonntag domenica zondag niedziela söndag sondag pazar воскресенье")):
    WEEKDAYS |= {name: _day for name in _names.split()}
WEEKDAY_ABBREVIATIONS = {"Mon": 0, "Tue": 1, "Tues": 1, "Wed": 2, "Thu": 3, "Thur": 3, "Thurs": 3, "Fri": 4,
                         "Sat": 5, "Sun": 6}

# Month names, in the lexicon languages: each maps to its number.
MONTHS: dict[str, int] = {}
for _month, _names in enumerate((
        "january jan enero janvier januar gennaio janeiro januari styczeń januari ocak январь январе января",
        "february feb febrero février februar febbraio fevereiro februari luty februari şubat февраль феврале февраля",
        "march mar marzo mars märz marzo março maart marzec mars mart март марте марта",
        "april apr abril avril april aprile abril april kwiecień april nisan апрель апреле апреля",
        "may mayo mai mai maggio maio mei maj maj mayıs май мае мая",
        "june jun junio juin juni giugno junho juni czerwiec juni haziran июнь июне июня",
        "july jul julio juillet juli luglio julho juli lipiec juli temmuz июль июле июля",
        "august aug agosto août august agosto agosto augustus sierpień augusti ağustos август августе августа",
        "september sep sept septiembre septembre september settembre setembro september wrzesień september eylül "
        "сентябрь сентябре сентября",
        "october oct octubre octobre oktober ottobre outubro oktober październik oktober ekim октябрь октябре октября",
        "november nov noviembre novembre november novembre novembro november listopad november kasım ноябрь ноябре "
        "ноября",
        "december dec diciembre décembre dezember dicembre dezembro december grudzień december aralık декабрь "
        "декабре декабря"), start=1):
    MONTHS |= {name: _month for name in _names.split()}

# Units by dimension: every name of a unit maps to its symbol.
UNITS: dict[str, tuple[str, str]] = {}
for _dimension, _groups in {
    "mass": "kg kilo kilos kilogram kilograms kilogramme kilogrammes|g gram grams gramme grammes gramm"
            "|mg milligram milligrams|lb lbs pound pounds|oz ounce ounces|st stone stones|t tonne tonnes ton tons",
    "length": "km kilometer kilometers kilometre kilometres|m meter meters metre metres|cm centimeter centimeters"
              " centimetre centimetres|mm millimeter millimeters millimetre millimetres|mi mile miles"
              "|ft foot feet|in inch inches|yd yard yards",
    "volume": "l liter liters litre litres|ml milliliter milliliters millilitre millilitres|cl|dl"
              "|gal gallon gallons|cup cups|tbsp tablespoon tablespoons|tsp teaspoon teaspoons|pt pint pints"
              "|qt quart quarts",
    "temperature": "°c celsius centigrade|°f fahrenheit|k kelvin",
    "speed": "km/h kph kmh|mph|m/s|kn knot knots",
    "data": "b byte bytes|kb kilobyte kilobytes|mb megabyte megabytes|gb gigabyte gigabytes|tb terabyte terabytes"
            "|kib|mib|gib|tib",
}.items():
    for _group in _groups.split("|"):
        _names = _group.split()
        UNITS |= {name: (_names[0], _dimension) for name in _names}

# Other names of one thing: currencies by code, name and symbol.
ALIASES: dict[str, frozenset[str]] = {}
for _code, _names in {
    "usd": "dollar dollars us$ $ buck bucks", "eur": "euro euros €", "gbp": "pound pounds sterling £ quid",
    "jpy": "yen ¥ 円", "cny": "yuan renminbi rmb 元", "chf": "franc francs", "sek": "krona kronor",
    "nok": "krone kroner", "dkk": "krone kroner", "pln": "zloty złoty zł", "try": "lira liras ₺",
    "rub": "ruble rubles rouble roubles ₽", "inr": "rupee rupees ₹", "krw": "won ₩", "brl": "real reais r$",
    "mxn": "peso pesos", "cad": "canadian", "aud": "australian", "czk": "koruna",
}.items():
    for _name in (_code, *_names.split()):
        ALIASES[_name] = ALIASES.get(_name, frozenset()) | {_code}
