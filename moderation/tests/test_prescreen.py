from moderation.prescreen import text_prescreen


def test_plain_text_has_no_flags_and_no_risk():
    screen = text_prescreen(title="Lentil soup", body="Onion, carrot and lentils. Simmer for 25 minutes.")
    assert screen.flags == []
    assert screen.risk == 0


def test_spam_is_flagged_for_links_shouting_and_watch_words():
    screen = text_prescreen(title="BUY NOW!!!", body="CLICK HERE FOR FREE MONEY http://x.test/a http://x.test/b")
    assert "2 links" in screen.flags
    assert "shouting" in screen.flags
    assert "excessive punctuation" in screen.flags
    assert any(f.startswith("watch words: buy now, click here, free money") for f in screen.flags)
    assert screen.risk >= 50


def test_risk_is_capped_and_deterministic():
    body = " ".join(f"https://spam.test/{i} crypto scam winner idiot" for i in range(20))
    first = text_prescreen(title="x", body=body)
    assert first.risk == 100
    assert first == text_prescreen(title="x", body=body)


def test_short_uppercase_text_is_not_shouting():
    assert "shouting" not in text_prescreen(title="OK", body="FYI").flags
