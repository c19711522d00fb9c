"""Evaluation: simulated users, their hidden preferences, and the personalization score.

    problems.py  GSM8K-style word problems from templates; a held-out set never trained on
    personas.py  what a persona is: first message, rubric of named checks, replies
    student.py   the student: homework answers that must not look AI-written
    teacher.py   the teacher: specific, friendly comments on a student's wrong answer
    users.py     a simulated user that plays sessions through the official OpenAI client
    oracle.py    a judge that reads the persona's rubric (to separate learning from judging)
    metrics.py   the personalization score on held-out first answers, and its curves
    retention.py the gate's capability probes apart from the preference, and the arithmetic one
    bfcl.py      tool calling: a seeded subset of the Berkeley Function-Calling Leaderboard, our checker
    instructions.py  instruction following: requests with one instruction a program checks

The runner that plays these users against a live server is drivers/simulate.py.
"""
