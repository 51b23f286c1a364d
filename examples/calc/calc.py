"""A tiny calculator: the sample project of the agentbox demo."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b
