// The JSX runtime, on the host page's React: elements made here are the host's own,
// whichever React version it runs (the plugin ships no React).
import * as React from "react";

type Props = Record<string, unknown> | null;

export const Fragment = React.Fragment;

export function jsx(type: React.ElementType, props: Props, key?: React.Key): React.ReactElement {
  const config = key === undefined ? props : { ...props, key };
  return React.createElement(type, config);
}

export const jsxs = jsx;
export const jsxDEV = jsx;
