"""Sentences every platform shows the same way, in Markdown; platforms only format them (mentions, bold)."""

from __future__ import annotations

from core import wording as engine_wording


def interrupted() -> str:
    return "⚠️ This answer was interrupted because the bot restarted; please ask again."


def failed(message: str) -> str:
    return f"⚠️ {message}"


def tool_running(tool: str) -> str:
    return f"_🔧 Running `{tool}`…_"


def waiting_for_approval() -> str:
    return "_⏸ Waiting for approval (see below)…_"


def approval_heading(who: str, count: int) -> str:
    """`who` is already formatted by the platform (a mention)."""
    calls = "this tool call" if count == 1 else f"these {count} tool calls"
    return f"🔐 **Approval needed** — {who} asked me to run {calls}."


def approved_by(actor: str) -> str:
    return f"✅ Approved by {actor}"


def rejected_by(actor: str) -> str:
    return f"❌ Rejected by {actor}"


def approval_expired() -> str:
    return f"⌛ {engine_wording.approval_expired()}"


def more_calls_hidden(count: int) -> str:
    return f"…and {count} more call{'s' if count != 1 else ''} (use Approve all or Reject all)."


def click_failed() -> str:
    return "Sorry, I couldn't record that click. Please try again in a moment."


def approval_not_shown() -> str:
    return "⚠️ I couldn't post the approval request, so nothing was run. Please ask again."


def database_unreachable() -> str:
    """A question that could not be recorded, so will not be answered (the platform's last redelivery, or held too long)."""
    return "I can't reach my database right now — ask again in a minute."


def shutting_down() -> str:
    return "The bot is restarting; please try again in a moment."


def not_enabled_here() -> str:
    return "relaybot is not enabled in this workspace."


def empty_question() -> str:
    return "Ask me something after the mention, e.g. “@relaybot what is our deploy process?”"


def sources_title() -> str:
    return "Sources"


def more_sources(count: int) -> str:
    return f"…and {count} more"


def citations_removed(numbers: tuple[int, ...]) -> str:
    """Where a surface cannot take back streamed text (a terminal): the citations dropped from the answer."""
    cited = ", ".join(f"[{n}]" for n in numbers)
    return f"(left out {cited}: the answer cited no such source)"


def default_thread_name() -> str:
    return "Answer"


def approval_footer(when: str) -> str:
    """`when` is the expiry as the platform shows times."""
    return f"Expires {when}. Approve or reject each call below."


def direct_messages_off() -> str:
    return "Direct messages to relaybot are turned off; please mention me in a channel instead."


def not_your_workspace_to_decide() -> str:
    return "Only people of a workspace where relaybot is enabled can decide this approval."


def approval_part(first: int, last: int, total: int) -> str:
    """The heading of a further approval message, for requests with more calls than one message shows."""
    return f"🔐 **Approval needed** (continued) — calls {first}–{last} of {total}."


def more_calls_below(count: int, messages: int) -> str:
    """Calls past what one approval message shows, posted in `messages` further messages."""
    where = "the next message" if messages == 1 else f"the next {messages} messages"
    return f"…and {count} more call{'s' if count != 1 else ''} in {where}, each with its own buttons."


def full_arguments_label() -> str:
    return "Full arguments"


def arguments_cut() -> str:
    return f"✂️ Arguments shortened to fit here; “{full_arguments_label()}” shows them whole."


def full_arguments_heading(tool: str, part: int, parts: int) -> str:
    """`tool` is a registered tool's name; `part` counts from 1."""
    return f"**{full_arguments_label()}** of `{tool}`" + (f" ({part}/{parts})" if parts > 1 else "")


def full_arguments_already_shown() -> str:
    return "The full arguments of that call are already in this thread."


def approval_expired_line(started_tools: tuple[str, ...]) -> str:
    """The expired line of an approval message: nothing ran, unless a crash had left calls started
    (`ApprovalView.started_tools`)."""
    if started_tools:
        return f"⌛ {engine_wording.approval_expired_after_start(started_tools)}"
    return approval_expired()


def direct_messages_members_only() -> str:
    return "I answer direct messages only from members of a workspace where relaybot is enabled; please ask me there."


def membership_unknown() -> str:
    return "I couldn't check whether you're a member of a workspace where relaybot is enabled; please try again in a moment."


def full_arguments_attached(count: int) -> str:
    calls = "the call" if count == 1 else f"all {count} calls"
    return f"**{full_arguments_label()}** of {calls}, in the order the model wrote them, are in the attached file."


def ask_usage() -> str:
    return ("Ask a question after the command, e.g. `/ask when is the next deploy window?` Start it with `private:` "
            "for an answer only you see, or `dm:` for one in your DMs.")


def ask_not_a_member() -> str:
    return ("I'm not a member of this channel, so I can't answer here. Invite me first "
            "(`/invite` me, or mention me and choose to add me), then ask again.")


def asked(who: str, question: str) -> str:
    """The question of a slash command, shown where everyone sees it; `who` is formatted by the platform."""
    return f"{who} asked: {question}"


def assistant_thinking() -> str:
    return "is thinking…"


def loading_messages() -> tuple[str, ...]:
    """Shown in turn under the thread's status while nothing is written yet (Slack takes at most 10)."""
    return ("Reading the question…", "Looking through what I know…", "Writing an answer…")


def assistant_prompts() -> list[tuple[str, str]]:
    """Suggested prompts when an assistant thread starts: (title, message)."""
    return [
        ("What can you do?", "What can you help me with, and which documents and tools can you use?"),
        ("Search our documents", "Search our documents for "),
        ("Summarise a thread", "Summarise the discussion in this thread: "),
    ]


def assistant_prompts_title() -> str:
    return "Try asking:"


def home_title() -> str:
    return "relaybot"


def home_how_to() -> str:
    return ("**How to ask me**\n"
            "• Mention me in a channel: I answer in the thread, and follow-ups there need no mention.\n"
            "• Send me a direct message, or open a thread with me in the AI-app pane.\n"
            "• Type `/ask` and your question in a channel I'm in.\n"
            "Tools with side effects wait for an approval; the ones waiting for you are listed below.")


def home_no_approvals() -> str:
    return "Nothing is waiting for your approval."


def home_approvals_heading(count: int) -> str:
    return "**Waiting for your approval**" if count == 1 else f"**Waiting for your approval ({count})**"


def home_more_approvals(count: int) -> str:
    return f"…and {count} more: open their threads to decide."


def home_approvals_elsewhere(count: int, where: str) -> str:
    """Approvals in conversations the viewer cannot read: named, never shown (`where` formatted by the platform)."""
    if count == 1:
        return f"An approval waits in {where}, where you cannot read: its calls are shown only to people in that conversation."
    return f"{count} approvals wait in {where}, where you cannot read: their calls are shown only to people in that conversation."


def home_approval_where(where: str) -> str:
    """`where` is already formatted by the platform (a channel link)."""
    return f"Asked in {where}."


def ask_not_allowed() -> str:
    return "I only answer people of the workspaces I serve."


# ----- changing a channel's settings from chat (adapters/slack/admin.py, adapters/discord/admin.py) -----


def settings_only_admins(who: str) -> str:
    """`who` names the platform's admins, e.g. "workspace admins and owners"."""
    return f"Only {who} can change relaybot's settings here. Nothing was changed."


def settings_in_a_channel() -> str:
    return "Channel settings are changed in the channel: run this command there, not in a DM."


def settings_saved(changes: list[str]) -> str:
    if not changes:
        return "Nothing changed: the settings were already so."
    return "Saved this channel's settings:\n" + "\n".join(f"• {line}" for line in changes)


def settings_invalid(reason: str) -> str:
    return f"That setting was not saved: {reason}."


def settings_failed() -> str:
    return "I could not read or save this channel's settings just now; nothing was changed. Please try again."


def settings_no_history() -> str:
    return "No change to this channel's settings has been recorded."


# ----- 👍/👎 under a final answer (adapters/slack/feedback.py, adapters/discord/feedback.py) -----

FEEDBACK_PROMPT = "Was this answer helpful?"
FEEDBACK_MODAL_TITLE = "What was wrong?"
FEEDBACK_MODAL_LABEL = "What was wrong with this answer? (optional)"
FEEDBACK_MODAL_PLACEHOLDER = "Wrong, incomplete, out of date, not what you asked…"


def feedback_thanks(up: bool) -> str:
    return "Thanks for the 👍." if up else "Thanks: your 👎 is noted."


def feedback_comment_thanks() -> str:
    return "Thanks: your 👎 and what you wrote are noted."


def feedback_unknown_answer() -> str:
    return "This answer is no longer on record, so the vote was not kept."


# ----- "Stop this answer", Slack's message shortcut (adapters/slack/controls.py) -----

def stop_shortcut_not_mine() -> str:
    return "“Stop this answer” stops my answers only, and that message is not one of them."


def stop_shortcut_no_answer() -> str:
    return "That message is not an answer I am still writing, so there is nothing to stop."


# ----- Discord's private answers and message commands (adapters/discord/private_answers.py, message_commands.py) -----

def private_moved_to_dm() -> str:
    return ("Your private answer continues here: Discord lets me update a private reply for 15 minutes only, "
            "and not at all once it is dismissed.")


def private_approval_in_dm() -> str:
    return "I need your approval before I go on: the request is in your DMs with me, where only you see it."


def about_message(author: str, text: str) -> str:
    """The question "Ask relaybot about this" asks: the message itself, said to be someone's."""
    return f"About this message from {author}:\n\n{text}"


def summarise_request() -> str:
    return "Summarise this conversation: its main points, what was decided, and what is still open."


def cannot_read_here_answered_privately() -> str:
    return ("I can't read this channel (I may not read its messages here, or the Message Content intent is off), "
            "so I answered from this message alone, and only you can see it.")


def cannot_read_here_to_summarise() -> str:
    return ("I can't read this channel (I may not read its messages here, or the Message Content intent is off), "
            "so I can't summarise it.")


def nothing_to_summarise() -> str:
    return "I found no messages with text here to summarise."


def private_approval_dms_refused() -> str:
    return ("This answer needs your approval, which a private answer asks for in your DMs with me, and I may not "
            "take clicks in DMs here. Ask again without `private` to decide it in the channel.")


# ----- Slack's private answers and message shortcuts (adapters/slack/private_answers.py, shortcuts.py) -----

def private_thinking() -> str:
    return "_Thinking… only you will see this answer._"


def private_answer_moved_to_dm() -> str:
    return ("I couldn't show you this answer where you asked (Slack lets me reply there only 5 times within "
            "30 minutes), so here it is in your DMs.")


def private_answer_failed() -> str:
    return "Something went wrong while I was answering; please ask again."


def answering_in_dm() -> str:
    return "I'm answering in your DMs with me."


def asked_in_dm(question: str) -> str:
    """The question of `/ask dm:`, atop its answer's thread in the asker's DM."""
    return f"You asked: {question}"


def thread_unreadable_answered_privately() -> str:
    return ("I can't read this thread (I'm not in this conversation), so I answered from this message alone, "
            "and only you can see it. Invite me to read the whole thread.")


def thread_unreadable_to_summarise() -> str:
    return "I can't read this thread: I'm not in this conversation. Invite me (`/invite`), then try again."


def thread_read_failed() -> str:
    return "I couldn't read this thread just now; please try again in a minute."
