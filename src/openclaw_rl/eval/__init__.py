"""Evaluation: simulated users, their hidden preferences, and the personalization score.

    problems.py  GSM8K-style word problems from templates; a held-out set never trained on
    personas.py  the student and the teacher: first message, rubric (named checks), replies
    users.py     a simulated user that plays sessions through the official OpenAI client
    oracle.py    a judge that reads the persona's rubric (to separate learning from judging)
    metrics.py   the personalization score on held-out first answers, and its curves
"""
