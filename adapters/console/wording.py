"""Sentences only the terminal chat shows: its greeting, its commands' help and answers, and Ctrl-C's notes."""

from __future__ import annotations

from pathlib import Path

COMMANDS = (
    ("/help", "this list"),
    ("/new", "start a new conversation (the bot forgets this one's earlier turns)"),
    ("/sources", "the sources the last answer was given, the ones it cited marked *"),
    ("/quit", "leave (so do Ctrl-D, and Ctrl-C while no answer is running)"),
)


def greeting(log_file: Path | None) -> str:
    lines = ["relaybot chat — type a question; /help lists the commands, Ctrl-C stops an answer."]
    if log_file is not None:
        lines.append(f"Logs go to {log_file}.")
    return "\n".join(lines) + "\n"


def help_text() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    rows = [f"  {name.ljust(width)}  {what}" for name, what in COMMANDS]
    return "\n".join(["Commands:", *rows, "Ctrl-C while an answer is running stops it; a second Ctrl-C quits."]) + "\n"


def unknown_command(word: str) -> str:
    return f"There is no command {word}; /help lists them.\n"


def new_conversation() -> str:
    return "New conversation: earlier turns are forgotten.\n"


def no_sources_yet() -> str:
    return "No answer in this conversation has been given sources yet.\n"


def stop_refused(message: str) -> str:
    """When Stop did not take (the answer had just finished, the database did not answer): the engine's sentence."""
    return f"\n({message})\n"


def stop_failed() -> str:
    return "\n(The answer could not be stopped: the database did not answer. A second Ctrl-C quits.)\n"
