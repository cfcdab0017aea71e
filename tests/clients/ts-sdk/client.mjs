// The official MCP TypeScript SDK 1.x driving the shim named by MCP_SHIM over stdio, as an
// application built on it would: one JSON line on stdout per event, for the Rust test to read.
//
//   node client.mjs stream ARGS_JSON   exec as a task: client.experimental.tasks.callToolStream
//   node client.mjs cancel ARGS_JSON   the same, cancelling the task once it is created
//   node client.mjs call ARGS_JSON     exec as a plain client.callTool (the SDK's default
//                                      60 s request timeout)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [mode, argsJson] = process.argv.slice(2);
const args = JSON.parse(argsJson);
const emit = (kind, value) => console.log(JSON.stringify({ kind, value }));
const failure = e => ({ code: e?.code, message: String(e?.message ?? e) });

const transport = new StdioClientTransport({
    command: process.env.MCP_SHIM,
    env: { ...process.env },
    stderr: 'inherit'
});
const client = new Client({ name: 'yieldshell-e2e-ts-sdk', version: '0' });
await client.connect(transport);
emit('capabilities', client.getServerCapabilities());
const { tools } = await client.listTools();
emit('exec', tools.find(t => t.name === 'exec'));

if (mode === 'call') {
    const started = Date.now();
    try {
        emit('result', await client.callTool({ name: 'exec', arguments: args }));
    } catch (e) {
        emit('error', failure(e));
    }
    emit('elapsed_ms', Date.now() - started);
} else {
    const stream = client.experimental.tasks.callToolStream(
        { name: 'exec', arguments: args },
        CallToolResultSchema
    );
    for await (const message of stream) {
        if (message.type === 'error') {
            emit('error', failure(message.error));
            continue;
        }
        emit(message.type, message.task ?? message.result);
        if (mode === 'cancel' && message.type === 'taskCreated') {
            try {
                emit('cancelled', await client.experimental.tasks.cancelTask(message.task.taskId));
            } catch (e) {
                emit('error', failure(e));
            }
        }
    }
    emit('list', await client.experimental.tasks.listTasks());
}
await client.close();
