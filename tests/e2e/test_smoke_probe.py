from tests.support.harness import RawClient


async def test_say_streams_chunks_and_ends_turn(server: RawClient) -> None:
    session = await server.new_session()
    prompt = await server.prompt(session, [{"say": "a"}, {"say": "b"}])
    response = await server.response(prompt)
    assert response["result"] == {"stopReason": "end_turn"}
    assert server.texts(session) == ["a", "b"]
