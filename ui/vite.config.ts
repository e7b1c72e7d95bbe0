// Builds the view as one UMD file that Airflow's UI loads as a plugin: React and ReactDOM
// are the host page's (globalThis.React / ReactDOM), so is the JSX runtime (src/jsx.ts);
// Chakra UI and Emotion are bundled. The output goes into the Python package.
import { resolve } from "node:path";
import { defineConfig } from "vite";

export default defineConfig({
  build: {
    emptyOutDir: false,
    lib: {
      entry: resolve(__dirname, "src/main.tsx"),
      fileName: () => "app-view.js",
      formats: ["umd"],
      name: "AirflowPlugin",
    },
    outDir: resolve(__dirname, "../provider/torchx_provider/plugins/static"),
    rollupOptions: {
      external: ["react", "react-dom"],
      // Chakra's modules start with "use client" (for server components): meaningless here
      onwarn: (warning, warn) => {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
      output: { globals: { react: "React", "react-dom": "ReactDOM" } },
    },
    sourcemap: false,
  },
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  esbuild: { jsx: "automatic" },
  resolve: {
    alias: [
      { find: /^react\/jsx-(dev-)?runtime$/, replacement: resolve(__dirname, "src/jsx.ts") },
    ],
  },
});
