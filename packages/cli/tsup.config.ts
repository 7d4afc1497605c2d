import { cpSync, readFileSync } from "node:fs";
import { sharedTsupConfig } from "../../tsup.shared.ts";

const { version } = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")) as { version: string };

// Workspace packages (and the engine's pure-JS jinja) are bundled; the native addon and the default model
// (a package file found relative to its own package) stay external, and so do the CLI's npm dependencies
// (prom-client, for serve's metrics). sharp (the engine's image decoder, a native libvips binding, imported
// lazily when `run --image` or chat's `/image` decodes one) is never bundled: it is a dependency of the CLI,
// installed with its platform binary. The server's web page files are copied to dist/webui, where the
// bundled server looks for them.
export default sharedTsupConfig({
  entry: { index: "src/index.ts", keepquant: "src/bin.ts" },
  dts: { entry: { index: "src/index.ts" } },
  noExternal: [/^@keepquant\/(?!tt-native|default-model)/, /^@huggingface\/jinja/],
  external: ["@keepquant/tt-native", "@keepquant/default-model", "sharp"],
  define: { __KEEPQUANT_VERSION__: JSON.stringify(version) },
  banner: { js: "#!/usr/bin/env node" },
  onSuccess: async () => {
    cpSync(new URL("../server/webui", import.meta.url), new URL("./dist/webui", import.meta.url), { recursive: true });
  },
});
