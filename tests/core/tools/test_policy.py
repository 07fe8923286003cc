"""The approval policy lets the requester, listed approvers, listed roles and admins decide."""

from __future__ import annotations

from core.tools import ApprovalPolicy

POLICY = ApprovalPolicy(approvers=frozenset({"U_LEAD"}), approver_roles=frozenset({"ops"}))


def test_requester_may_decide() -> None:
    assert POLICY.may_decide(actor="U1", requested_by="U1")
    assert ApprovalPolicy().may_decide(actor="U1", requested_by="U1")


def test_listed_approver_and_role_may_decide() -> None:
    assert POLICY.may_decide(actor="U_LEAD", requested_by="U1")
    assert POLICY.may_decide(actor="U2", requested_by="U1", actor_roles=["dev", "ops"])


def test_others_may_not() -> None:
    assert not POLICY.may_decide(actor="U2", requested_by="U1")
    assert not POLICY.may_decide(actor="U2", requested_by="U1", actor_roles=["dev"])
    assert not ApprovalPolicy().may_decide(actor="U_LEAD", requested_by="U1")


def test_admin_may_decide_when_the_adapter_says_so() -> None:
    assert POLICY.may_decide(actor="U2", requested_by="U1", actor_is_admin=True)


def test_empty_actor_never_matches_an_empty_requester() -> None:
    assert not ApprovalPolicy().may_decide(actor="", requested_by="")


def test_describe_names_who_can_decide() -> None:
    assert ApprovalPolicy().describe("U1") == "Only U1 (who asked) or an admin can approve or reject this."
    sentence = POLICY.describe("U1", mention=lambda user: f"<@{user}>")
    assert sentence == (
        "Only <@U1> (who asked), <@U_LEAD>, anyone with the role ops or an admin can approve or reject this."
    )
    two_roles = ApprovalPolicy(approver_roles=frozenset({"ops", "sre"})).describe("U1")
    assert two_roles == "Only U1 (who asked), anyone with one of the roles ops, sre or an admin can approve or reject this."
