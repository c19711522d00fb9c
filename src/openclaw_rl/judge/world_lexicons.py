"""More languages for the word lists of `judge.lexicons` (data, no logic).

`judge.lexicons` holds a dozen European languages, Japanese and Chinese; these lists add
the common forms of thanks, approval, "that worked", rejection, doubt, thinking aloud,
follow-ups and irony in about forty more languages and scripts (Arabic, Hebrew, Persian,
Urdu, Hindi, Bengali, Tamil, Thai, Korean, Vietnamese, Indonesian and Malay, Tagalog,
Swahili, Greek, Czech, Slovak, Hungarian, Romanian, Finnish, Danish, Norwegian, Icelandic,
Ukrainian, Bulgarian, Serbian, Croatian, Slovenian, the Baltic languages, Catalan, Basque,
Welsh, Irish, Afrikaans, Georgian, Armenian ...), and English forms the first lists lacked
("nailed it", "that did the trick", emoji). They were written from general knowledge of
each language, not from the labelled splits, so that the rules read a language no split
contains. `judge.lexicons` joins each list with its own.

Decisions and why: a single word goes in only where it rarely means anything else in
another language the rules read ("pas" is French for "not", so not Indonesian "exactly");
scripts without spaces between words (Thai, Japanese, Chinese) and Korean, whose endings
attach to the word, are matched anywhere by the rules (`people_state._lexicon`).
"""

from __future__ import annotations

__all__ = ["APPROVAL", "BUT", "CHANGE", "DEFECT", "DEFERRAL", "DOUBT_VERBS", "FOLLOW_UP_OPENERS", "LEADING_NO",
           "NEGATED_COPULA", "NEGATION", "NEGATIVE_EVALUATION", "SARCASM", "TAG_QUESTIONS", "THANKS", "THAT_IS",
           "TOPIC_CHANGE", "WANTS", "WRONG"]

THANKS = (
    "many thanks|much appreciated|thanks a lot|thanks a ton|thanks so much|thank you so much|muchas gracias"
    "|mil gracias|merci beaucoup|dankeschön|danke schön|grazie mille|valeu|brigado|brigada|dankjewel|dankuwel"
    "|dziękówa|tack så mycket|mange tak|tusen takk|takk|kiitos|kiitti|takk fyrir|sağol|eyvallah|благодарю"
    "|дякую|спасибі|díky|děkuji|děkuju|ďakujem|vďaka|köszönöm|köszi|kösz|mulțumesc|mulţumesc|multumesc|mersi"
    "|hvala|хвала|благодаря|ευχαριστώ|ευχαριστούμε|ευχαριστω|ačiū|paldies|aitäh|tänan|faleminderit"
    "|ありがとうございます|どうも|助かりました|助かります|謝謝|感謝|多谢|多謝|감사합니다|감사해요|고마워|고맙습니다"
    "|cảm ơn|cám ơn|terima kasih|makasih|trims|ขอบคุณ|धन्यवाद|शुक्रिया|dhanyavaad|shukriya|شکریہ|ধন্যবাদ"
    "|شكرا|شكراً|مشكور|תודה|מרסי|ممنون|سپاس|asante|salamat|gràcies|eskerrik asko|diolch|go raibh maith agat"
    "|dankie|நன்றி|ధన్యవాదాలు|მადლობა|շնորհակալություն|ngiyabonga|na gode|tak")

APPROVAL = (
    # English, without thanks
    "nailed it|you nailed it|chef's kiss|that did the trick|did the trick|works now|working now|it works"
    "|that worked|that works|worked perfectly|works perfectly|worked great|flawless|bang on|on point|spot-on"
    "|you rock|lifesaver|life saver|legend|owe you|owes you|i owe you one|that's right|that's correct"
    "|you're a star|you star|you're the best|you are the best|you're amazing|you're a genius|thank god"
    "|clever|neat trick|good to know"
    "|you're right|exactly right|correct|precisely|just right|all good now|good to go|back to normal|sorted"
    "|fixed it|that fixed it|that solved it|problem solved|finally|yesss|yess|yay|woohoo|woo|hooray|10/10"
    "|100%|exactly the|exactly what|just the|superb|outstanding|impressive|gorgeous|beautifully|well put"
    "|love that|loved it|much appreciated|saved me|saves me|you saved|worked a treat|brilliant stuff"
    "|👍|🙏|🎉|🙌|👌|💯|✅|🥳|😍|❤️|❤|👏"
    # Spanish, French, German, Italian, Portuguese, Dutch, Catalan
    "|exacto|exactamente|eso es|justo lo que|buenísimo|excelente|de lujo|genial|exactement|c'est ça|impeccable"
    "|nickel|au top|ça fonctionne|passt|toll|genau das|richtig so|stimmt|spitze|esatto|giusto"
    "|fantastico|bellissimo|isso mesmo|exato|certinho|beleza|massa|geweldig|klopt|precies|perfecte"
    "|exacte|funciona"
    # Nordic, Baltic, Slavic, Hungarian, Romanian, Greek, Turkish
    "|toppen|exakt|stämmer|klockrent|præcis|virker|fedt|akkurat|fungerer|stemmer|täydellinen|juuri sopiva"
    "|juuri noin|toimii|mahtavaa|loistavaa|loistava|dokładnie|zgadza się|o to chodziło|przesně|přesně"
    "|přesně tohle|funguje|skvělé|výborně|paráda|presne|výborne|tökéletes|szuper|pontosan|működik|remek"
    "|nagyszerű|perfect|exact|funcționează|excelent|savršeno|odlično|točno|tačno|radi|odlicno"
    "|идеально|заработало|точно|верно|то, что нужно|то что нужно|класс|чудово|ідеально|працює|саме те"
    "|перфектно|страхотно|работи|τέλεια|τέλειο|ακριβώς|σωστό|σωστά|λειτουργεί|δουλεύει|υπέροχο|άψογο|άψογα"
    "|tam olarak bu|tam olarak|çalışıyor|doğru|süper|aynen"
    # Asian, Middle Eastern, African languages
    "|その通り|ばっちり|うまくいった|動いた|素晴らしい|いいね|正解|没错|太好了|成功了|有用|正是|对了|完全正确"
    "|완벽|좋아요|맞아요|맞습니다|됐어요|잘 돼요|작동해요|최고|đúng rồi|tuyệt vời|hoàn hảo|chính xác|được rồi"
    "|chạy rồi|ổn rồi|mantap|sip|tepat|berhasil|sempurna|keren|betul|bagus|ใช่เลย|เยี่ยม|สมบูรณ์แบบ|ได้แล้ว"
    "|ถูกต้อง|बढ़िया|बिल्कुल सही|सही है|काम कर गया|ممتاز|رائع|بالضبط|صحيح|تمام|اشتغل|מושלם|מעולה|בדיוק|עובד"
    "|אחלה|عالی|دقیقا|درسته|safi|sawa kabisa|ayos|galing|gumana|tama")

WRONG = (
    "nem jó|nem helyes|rossz|špatně|chybně|to není pravda|nesprávně|zle|greșit|nu e corect|nu e bine|feil"
    "|forkert|väärin|ei pidä paikkaansa|λάθος|δεν είναι σωστό|sai rồi|không đúng|salah|keliru|bukan begitu"
    "|틀렸어요|틀렸습니다|틀려요|아니에요|ผิด|ไม่ถูก|गलत|ग़लत|غلط|خطأ|غير صحيح|לא נכון|טעות|si sahihi"
    "|не вірно|невірно|неправильно|погрешно|pogrešno|netočno|netačno|ni prav|nepareizi|neteisingai"
    "|incorrecte|ez da zuzena|nicht korrekt|kompletter quatsch|hiç olmamış|olmamış|olmadı|ni de lejos"
    "|de ninguna manera|pas du tout|mitnichten|per niente|de jeito nenhum|helemaal niet|ani trochę"
    "|barely enough|not enough|nowhere near enough|not nearly enough|way too little|far too little"
    "|that's not it|thats not it|not it at all|错的|是错|有误|間違って|틀린|the opposite of what|doesn't add up"
    "|don't add up|do not add up|does not add up|makes no sense|doesn't make sense")

# Saying the answer broke something: a defect, whatever praise opens the reply ("oh brilliant, you deleted ...").
DEFECT = (
    "you broke|you deleted|you removed my|you ruined|you made it worse|made it worse|even worse|now it's worse"
    "|broke everything|deleted my|lost my|wiped my|overwrote my|no longer works|stopped working|still broken"
    "|still crashes|still fails|still doesn't work|still not working|still wrong|sigue sin funcionar"
    "|ne marche toujours pas"
    "|geht immer noch nicht|funktioniert immer noch nicht|ancora non funziona|ainda não funciona|werkt nog steeds niet"
    "|nadal nie działa|fungerar fortfarande inte|hâlâ çalışmıyor|всё ещё не работает|до сих пор не работает"
    "|还是不行|まだ動かない|여전히 안 돼요|vẫn không chạy|masih tidak bisa|ještě nefunguje|még mindig nem működik")

# Asking for it shorter, simpler or again, in other languages: a question with these is no follow-up.
CHANGE = (
    "encurtar|mais curto|más corto|acórtalo|acortar|plus court|raccourcis|raccourcir|kürzer|più corto|accorcia"
    "|accorcialo|korter|krócej|skróć|kortare|lyhyemmin|lyhyempi|daha kısa|kısalt|короче|сократи|συντομότερο"
    "|ngắn hơn|lebih pendek|더 짧게|短く|短一点|简短|más simple|plus simple|einfacher|più semplice|mais simples"
    "|eenvoudiger|prościej|enklare|daha basit|проще|de nuevo|encore une fois|noch einmal|di nuovo|de novo"
    "|nog een keer|jeszcze raz|igen|tekrar|ещё раз|もう一度|再来一次|다시")

# "That's X": a sentence that says what the answer is, said before what was wanted instead.
THAT_IS = (
    "that's|that is|this is|it's|it is|c'est|ce sont|das ist|das sind|es ist|eso es|esto es|es|è|questo è"
    "|isso é|isto é|dat is|het is|to jest|to są|to je|det är|det er|tämä on|se on|bu|это|αυτό είναι|đó là"
    "|itu|ini|그건|그것은|이건|それは|これは|这是|那是|ez|az|זה|هذا|यह")

NEGATIVE_EVALUATION = (
    "quatsch|unsinn|blödsinn|tonterías|bobadas|n'importe quoi|nul|sciocchezze|bobagem|besteira"
    "|onzin|bzdura|bzdury|nonsens|saçma|чушь|ерунда|бред|でたらめ|胡说|ανοησίες|χάλια|hülyeség|nesmysl"
    "|blbost|hölynpöly|huono|omong kosong|jelek|vớ vẩn|tệ|dở|별로|최악|ไม่ดี|बेकार|سيء|גרוע|prostie"
    "|dålig|dårlig|huonoa|pésima|cutre|naff|rubbish|crap|trash|yikes|oof|ugh|🤦|😤|😡|🤢|💩")

SARCASM = (
    "oh yes, because|oh yeah, because|oh sure, because|because that's exactly"
    "|exactly what everyone wants|said no one ever|said nobody ever|what could possibly go wrong|radiating"
    "|oozing|slow clap|real genius|truly a masterpiece|sure, jan|oh fantastic|yeah because that's|oh because that's"
    "|because that's so|cool story"
    "|love that for|just what i needed, another|ja klar|na toll|na super|sí, claro|claro, claro|ouais c'est ça"
    "|bravo champion|certo, come no|ah sim, claro|ну конечно|ага, конечно|вот спасибо|jasne, jasne|no jasne"
    "|どうせ|はいはい|呵呵|好棒棒|잘도|😒|😑")

BUT = ("mutta|але|dar|αλλά|όμως|nhưng|tapi|namun|แต่|लेकिन|لكن|بس|אבל|しかし|けど|可是|하지만|그런데|ale"
       "|avšak|lakini|pero|però|tuttavia|jedoch|toutefois")

NEGATION = (
    "nem|nije|není|nejsou|ikke|ingen|ei|δεν|όχι|μην|không|chưa|tidak|bukan|gak|nggak|enggak|لا|ليس|مش"
    "|לא|אין|नहीं|मत|nahi|nahin|yok|hayır|hapana|hindi|ні|нема|немає|nav|ne|nicio|nimic|inte|niets|nada")

LEADING_NO = ("nem|ne|ei|όχι|không|tidak|bukan|hayır|ні|לא|لا|नहीं|nahi|아니요|아니|いいえ|不|nope"
              "|nah|nee|nej|no|non|nein|não|nie|нет|hapana")

DEFERRAL = (
    "moment|einen moment|ich muss erst|muss erst|ich schaue|ich frage|je vais d'abord|d'abord demander"
    "|je dois vérifier|je vais demander|je regarde|tengo que preguntar|primero tengo que|primero voy a"
    "|devo prima|devo chiedere|un attimo|aspetta|preciso ver|preciso perguntar|espera aí|no wait|depends on"
    "|it depends|need to see|need to check|have to see|have to check|let me do it|hold on|hold that thought"
    "|wait a sec|on paper|gotta check|gotta ask|will try it|will try that|i'll try|chwileczkę|poczekaj|hetkinen"
    "|odota|mietin|tarkistan|dur bir dakika|bir saniye|момент|секунду|подожди|сейчас посмотрю|почекай"
    "|μισό λεπτό|θα το σκεφτώ|để mình xem|chờ chút|để tôi nghĩ|sebentar|bentar|nanti|tunggu|잠깐|잠시만"
    "|생각해 볼게|考えさせて|ちょっと考え|確認します|让我看看|稍等|我查一下|一会儿|रुको|सोचता हूँ|لحظة|سأفكر"
    "|רגע|אני אחשוב|sekundu|počkej|rozmyslím|várj|gondolkodom|megnézem|stai puțin|mă gândesc|vänta"
    "|ska fundera|vent litt|vent lige|jeg tænker|un momento|déjame|espera|momentje|wacht even|ik moet eerst"
    "|eerst even|tengo que ver|tenho que ver|tenho de ver|muszę sprawdzić|muszę zapytać|will review|will read it"
    "|will look at it|will check it|i'll show|will show this|get back to you|i'll forward|will forward"
    "|i'll pass this on|ahora vuelvo|ya vuelvo|vuelvo enseguida|je reviens"
    "|bin gleich zurück|bin gleich wieder da|torno subito|torno tra|já volto|volto já|zaraz wracam|すぐ戻|马上回来"
    "|금방 올게|сейчас вернусь|скоро вернусь|hemen dönüyorum|ik ben zo terug|zo terug|strax tillbaka|kommer strax"
    "|palaan pian|mindjárt jövök|hned jsem zpátky|revin imediat|επιστρέφω|quay lại ngay|nanti balik|talk later"
    "|ttyl|gtg|got to go|gotta go|afk")

FOLLOW_UP_OPENERS = (
    "και|πόσο|πώς|τι|πού|πότε|ποιο|ποια|jak|kolik|kde|kdy|és|hogyan|mennyi|hol|mikor|entä|miten|kuinka"
    "|paljonko|missä|milloin|terus|lalu|bagaimana|berapa|di mana|kapan|còn|thế còn|bao nhiêu|ở đâu|khi nào"
    "|și|cum|cât|unde|când|og|hvad|hvordan|hvor|hvornår|і|як|скільки|де|коли|وكم|كيف|متى|أين|איך|כמה"
    "|מתי|איפה|और|कैसे|कितना|कब|कहाँ|how about|what about")

TOPIC_CHANGE = (
    "different topic|another topic|new topic|change of topic|unrelated question|on an unrelated note"
    "|totally unrelated|another question|new question"
    "|different question|random question|quick question|by the way|btw|next one|next question|moving on"
    "|otra pregunta|otra cosa|cambiando de tema|autre question|autre chose|changement de sujet|andere frage"
    "|anderes thema|themawechsel|altra domanda|cambiando argomento|outra pergunta|mudando de assunto"
    "|andere vraag|ander onderwerp|inne pytanie|inna sprawa|en annan fråga|toinen kysymys|başka bir soru"
    "|konu değişikliği|другой вопрос|другая тема|кстати|άλλη ερώτηση|câu hỏi khác|pertanyaan lain|다른 질문"
    "|別の質問|ところで|另一个问题|换个话题|顺便问")

NEGATED_COPULA = (
    "no sería|no serían|não seria|não seriam|ce ne serait pas|ne serait-ce pas|wäre es nicht|wären es nicht"
    "|waren das nicht|war das nicht|sind das nicht|ist das nicht|war es nicht|non sarebbe|non sarebbero"
    "|zou het niet|zijn het niet|czy to nie jest|czy to nie było|nie ma przypadkiem|nie ma|nie jest|czy nie ma|не в|не"
    "|není to|nebylo to|není|nebyl|nebyla|nebylo"
    "|nejsou|nebyly|nem|eikö se ole|eikö se ollut|eikö|er det ikke|var det ikke|er det ikkje|nu e|nu era|nu este"
    "|δεν είναι|δεν ήταν|μήπως|không phải là|không phải|bukannya|bukan|아닌가요|아니에요|아니었나요|아닌가"
    "|ไม่ใช่|क्या यह नहीं|أليس|أليست|זה לא|לא היה|хіба не|хіба|чи не|nije li|zar nije|nije|нали|не е ли")

DOUBT_VERBS = (
    "surely|pretty sure|i'm pretty sure|i was under the impression|creo que|creía que|pensé que|je croyais que"
    "|je pensais que|dachte|pensavo che|credevo che|achava que|pensei que|dacht|myślałem, że|myślałem że"
    "|trodde|luulin|ajattelin|azt hittem|myslel jsem|myslela jsem|zannediyordum|думал|думала|я думав"
    "|νόμιζα|tưởng|kirain|kukira|줄 알았|と思ってた|かと思った|我以为|मुझे लगा|ظننت|חשבתי|credeam"
    "|mislio sam|mislila sam|jeg troede|jeg trodde")

TAG_QUESTIONS = (
    "surely|right|correct|yeah|isn't it|verdad|¿no|giusto|nicht wahr|gell|prawda|že|да|ведь|правда|va"
    "|eller hur|vai|έτσι|όχι|di mi|ya|phải không|đúng không|맞죠|ですよね|よね|でしょ|对吧|是吧|ना"
    "|है ना|נכון|صح|أليس كذلك|ikke|eikö|değil miydi|değil miydin|değil mi|değil miymiş|mıydı|miydi")

WANTS = (
    "i want|i need|i'd like|i'd prefer|i wanted|i needed|quiero|necesito|prefiero|la quiero|lo quiero"
    "|je veux|je voudrais|il me faut|j'ai besoin|ich will|ich möchte|ich brauche|ich hätte gern|voglio|vorrei"
    "|ho bisogno|mi serve|quero|preciso|gostaria|ik wil|ik heb nodig|ik zou graag|chcę|chciałbym|chciałabym"
    "|potrzebuję|jag vill|jag behöver|jeg vil|jeg har brug for|haluan|tarvitsen|istiyorum|lazım|хочу|нужно"
    "|нужен|нужна|мне нужно|хочу|потрібно|chci|potřebuji|potřebuju|szeretném|kell|vreau|am nevoie"
    "|θέλω|χρειάζομαι|tôi muốn|mình cần|saya mau|saya ingin|aku mau|butuh|원해요|주세요|해 주세요|해주세요"
    "|ください|欲しい|してほしい|我要|我需要|请|请用|मुझे चाहिए|أريد|أحتاج|אני רוצה|אני צריך|צריך"
    "|por favor|s'il te plaît|s'il vous plaît|bitte|per favore|proszę|пожалуйста|alsjeblieft|lütfen|kérem"
    "|prosím|vă rog|παρακαλώ|làm ơn|tolong|부탁|お願い|من فضلك|בבקשה|कृपया")
