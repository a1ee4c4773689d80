"""Signing in to the dashboard, as every browser test starts."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from service.stack import LocalStack


def sign_in(page: Page, stack: LocalStack, key: str) -> None:
    page.goto(f"{stack.base_url}/ui/")
    page.fill("#api-key", key)
    page.click("#sign-in button[type=submit]")
    expect(page.locator("#jobs")).to_be_visible()
